"""Errors of the model runtime. Each names the file and, where there is one, the node."""

from ..errors import Vc4nnError


class ModelError(Vc4nnError):
    """A model file the runtime cannot use: its path, the node and what is wrong."""

    def __init__(self, message, path=None, node=None):
        where = []
        if node is not None:
            where.append(f"node {node!r}")
        if path is not None:
            where.append(f"in {path}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.path, self.node = path, node


class ModelFormatError(ModelError):
    """The file is not a readable model: wrong magic, truncated, corrupt."""


class UnsupportedModelError(ModelError):
    """A well-formed model using an operator or attribute this runtime does not run."""


def unsupported(graph, node, message):
    """An UnsupportedModelError about ``node`` of ``graph``: its operator as the file names it,
    the node and the file."""
    return UnsupportedModelError(f"{node.source_op or node.op}: {message}", graph.path, node.name)


class InputError(Vc4nnError):
    """``run`` was given an input of the wrong name, shape or dtype."""
