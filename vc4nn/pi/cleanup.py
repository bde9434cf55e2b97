"""Give GPU memory back however the process ends: normal exit, exception, SIGINT or SIGTERM.

GPU memory allocated through the mailbox belongs to the firmware, not to the process: if the
process dies holding it, it stays allocated until the next reboot. So every open PiDevice is
tracked here; ``atexit`` closes the survivors, and while any is open SIGINT and SIGTERM get a
handler that closes them all, puts the previous handlers back and then delivers the signal as
the previous handler would have (KeyboardInterrupt for SIGINT, death by SIGTERM by default).
"""

import atexit
import contextlib
import os
import signal
import sys
import threading

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_devices = []
_previous_handlers = {}
_atexit_registered = False


def track(device):
    global _atexit_registered
    _devices.append(device)
    if not _atexit_registered:
        atexit.register(close_all)
        _atexit_registered = True
    if not _previous_handlers and _in_main_thread():
        for signum in HANDLED_SIGNALS:
            _previous_handlers[signum] = signal.getsignal(signum)
            signal.signal(signum, _on_signal)


def untrack(device):
    if any(d is device for d in _devices):
        _devices[:] = [d for d in _devices if d is not device]
    if not _devices:
        _restore_handlers()


def tracked():
    return list(_devices)


def close_all():
    """Close every open device; one failing does not stop the others."""
    for device in reversed(list(_devices)):
        try:
            device.close()
        except Exception as e:
            sys.stderr.write(f"vc4nn: could not release the GPU memory of {device!r}: {e}\n")
            untrack(device)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM back while GPU memory changes hands, so none is lost untracked."""
    if not _in_main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _on_signal(signum, frame):
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    close_all()
    _restore_handlers()
    if callable(previous):
        previous(signum, frame)
    elif previous in (signal.SIG_DFL, None):
        # The default action (terminate) needs the real signal: it is restored above, so
        # sending it again ends the process the way the signal would have.
        os.kill(os.getpid(), signum)


def _restore_handlers():
    if not _previous_handlers or not _in_main_thread():
        return
    for signum, previous in _previous_handlers.items():
        if signal.getsignal(signum) is _on_signal:
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
    _previous_handlers.clear()


def _in_main_thread():
    return threading.current_thread() is threading.main_thread()
