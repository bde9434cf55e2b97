"""The disk cache of assembled programs (``vc4nn.runtime.program_cache``): a second start loads
what the first assembled, and a corrupt, stale or misplaced entry is never loaded."""

import dataclasses
import glob
import hashlib
import importlib
import json
import os

import pytest

from asm import kernel, r0, ra, uniform
from vc4nn import source_version
from vc4nn.runtime import program_cache
from vc4nn.runtime.program_cache import DiskStore

ASSEMBLED = []


@dataclasses.dataclass(frozen=True)
class AddPlan:
    adds: int


@kernel
def adder(a, plan):
    ASSEMBLED.append(plan)
    a.mov(ra[0], uniform)
    a.label("top")
    for _ in range(plan.adds):
        a.add(r0, r0, 1)
    a.exit()


def independent_words(plan):
    """The plan's code from a fresh assembly with no store (the reference)."""
    asm_kernel = importlib.import_module("asm.kernel")
    assert asm_kernel.program_store is None
    return adder.assemble(plan).words


def entries(folder):
    return glob.glob(os.path.join(str(folder), "*", "*.json"))


def assemble_with(store, plan):
    """``plan``'s program assembled while ``store``'s folder and version are the cache;
    ``store`` gets the hits and misses."""
    with program_cache.active(store.folder, store.version) as active:
        program = adder.assemble(plan)
    store.hits, store.misses = active.hits, active.misses
    return program


def test_second_start_loads_the_same_program(tmp_path):
    plan = AddPlan(3)
    first = DiskStore(str(tmp_path))
    program = assemble_with(first, plan)
    assert (first.hits, first.misses) == (0, 1) and len(entries(tmp_path)) == 1
    ASSEMBLED.clear()
    second = DiskStore(str(tmp_path))
    loaded = assemble_with(second, plan)
    assert (second.hits, second.misses) == (1, 0) and ASSEMBLED == []     # not assembled
    assert loaded.words == program.words == independent_words(plan)
    assert loaded.labels == program.labels and "top" in "".join(loaded.labels)


def test_other_arguments_are_other_entries(tmp_path):
    store = DiskStore(str(tmp_path))
    a, b = assemble_with(store, AddPlan(2)), assemble_with(store, AddPlan(5))
    assert len(entries(tmp_path)) == 2 and len(b.words) == len(a.words) + 3


@pytest.mark.parametrize("damage", ["truncated", "code changed", "not json", "empty"])
def test_a_corrupt_entry_is_assembled_again_and_rewritten(tmp_path, damage):
    plan = AddPlan(4)
    assemble_with(DiskStore(str(tmp_path)), plan)
    (path,) = entries(tmp_path)
    with open(path) as f:
        text = f.read()
    if damage == "truncated":
        text = text[:len(text) // 2]
    elif damage == "code changed":
        entry = json.loads(text)
        code = bytearray(bytes.fromhex(entry["code"]))
        code[0] ^= 1                                   # one bit of the first instruction
        entry["code"] = code.hex()
        text = json.dumps(entry)
    elif damage == "not json":
        text = "\x00\xff garbage"
    else:
        text = ""
    with open(path, "w") as f:
        f.write(text)
    ASSEMBLED.clear()
    store = DiskStore(str(tmp_path))
    program = assemble_with(store, plan)
    assert (store.hits, store.misses) == (0, 1) and ASSEMBLED == [plan]
    assert program.words == independent_words(plan)
    again = DiskStore(str(tmp_path))
    assert assemble_with(again, plan).words == program.words and again.hits == 1   # rewritten


def test_a_stale_generator_version_is_never_loaded(tmp_path):
    """An entry made by other assembler/kernel sources: not found under the new version, and
    refused even when it sits where the new version's entry would be."""
    plan = AddPlan(2)
    old = DiskStore(str(tmp_path), version="old-sources")
    assemble_with(old, plan)
    (old_path,) = entries(tmp_path)
    new = DiskStore(str(tmp_path), version="new-sources")
    new_path = new._entry(program_cache.describe(adder, (plan,), {}, True))
    os.makedirs(os.path.dirname(new_path), exist_ok=True)
    with open(old_path) as f:
        entry = json.load(f)
    entry["code"] = bytes(8 * len(independent_words(plan))).hex()     # wrong code, right digest
    entry["sha256"] = hashlib.sha256(bytes.fromhex(entry["code"])).hexdigest()
    with open(new_path, "w") as f:
        json.dump(entry, f)
    program = assemble_with(new, plan)
    assert (new.hits, new.misses) == (0, 1)
    assert program.words == independent_words(plan)


def test_an_entry_of_another_kernel_call_is_never_loaded(tmp_path):
    """A (colliding or copied) file holding another plan's program is refused: the entry stores
    the whole description, not only its hash."""
    store = DiskStore(str(tmp_path))
    assemble_with(store, AddPlan(7))
    (path,) = entries(tmp_path)
    target = store._entry(program_cache.describe(adder, (AddPlan(1),), {}, True))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(path, target)
    program = assemble_with(DiskStore(str(tmp_path)), AddPlan(1))
    assert program.words == independent_words(AddPlan(1))


def test_arguments_without_a_faithful_repr_are_not_cached(tmp_path):
    class Opaque:
        adds = 2
    store = DiskStore(str(tmp_path))
    assemble_with(store, Opaque())
    assert entries(tmp_path) == [] and store.misses == 1


def test_the_cache_can_be_switched_off_and_moved(tmp_path, monkeypatch):
    monkeypatch.setenv(program_cache.ENV_VAR, "off")
    assert program_cache.cache_dir() is None
    with program_cache.active() as store:
        assert store is None
    monkeypatch.setenv(program_cache.ENV_VAR, str(tmp_path / "here"))
    assert program_cache.cache_dir() == str(tmp_path / "here")
    monkeypatch.delenv(program_cache.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert program_cache.cache_dir() == os.path.join(str(tmp_path), "vc4nn", "programs")


def test_an_unwritable_cache_warns_and_assembles(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = DiskStore(str(blocker / "programs"))
    with pytest.warns(UserWarning, match="cannot be written"):
        program = assemble_with(store, AddPlan(2))
    assert program.words == independent_words(AddPlan(2))


def test_the_generator_version_changes_with_any_source_byte(tmp_path):
    import asm
    folder = tmp_path / "asm"
    folder.mkdir()
    for path in glob.glob(os.path.join(os.path.dirname(asm.__file__), "*.py")):
        (folder / os.path.basename(path)).write_bytes(open(path, "rb").read())
    before = source_version.source_digest([str(folder)])
    kernel_py = folder / "kernel.py"
    kernel_py.write_bytes(kernel_py.read_bytes() + b"\n")
    assert source_version.source_digest([str(folder)]) != before
    assert before == source_version.source_digest([os.path.dirname(asm.__file__)])


def test_the_generator_version_covers_the_hardware_facts(tmp_path):
    """Kernels choose layouts by vc4nn/hardware.py: a changed fact must make entries stale."""
    import vc4nn.hardware
    facts = tmp_path / "hardware.py"
    facts.write_bytes(open(vc4nn.hardware.__file__, "rb").read())
    before = source_version.source_digest([str(facts)])
    assert before == source_version.source_digest([vc4nn.hardware.__file__])
    facts.write_bytes(facts.read_bytes().replace(b"TMU_CACHE_WAYS = 1", b"TMU_CACHE_WAYS = 2"))
    assert source_version.source_digest([str(facts)]) != before
    import asm
    import vc4nn.kernels
    without_facts = [os.path.dirname(asm.__file__), os.path.dirname(vc4nn.kernels.__file__)]
    assert source_version.generator_version() == source_version.source_digest(
        without_facts + [vc4nn.hardware.__file__])


def test_the_plans_version_covers_the_c_core(tmp_path):
    """The cycle model lives in the C core too: an edited .c file must make tuned plans stale."""
    csrc = os.path.join(os.path.dirname(source_version.__file__), "emulator", "csrc")
    folder = tmp_path / "csrc"
    folder.mkdir()
    for path in glob.glob(os.path.join(csrc, "*.[ch]")):
        (folder / os.path.basename(path)).write_bytes(open(path, "rb").read())
    suffixes = source_version.PYTHON_SOURCE + source_version.C_SOURCE
    before = source_version.source_digest([str(folder)], suffixes)
    assert before == source_version.source_digest([csrc], suffixes)
    icache_c = folder / "icache.c"
    icache_c.write_bytes(icache_c.read_bytes() + b"\n")
    assert source_version.source_digest([str(folder)], suffixes) != before
