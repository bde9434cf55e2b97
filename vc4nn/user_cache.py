"""Where vc4nn keeps what it caches for a user (tuned plans, assembled programs)."""

import os


def user_cache_path(path, env_var, name):
    """``path`` if given, else the environment variable ``env_var`` (``off``: None, the cache is
    switched off), else ``$XDG_CACHE_HOME/vc4nn/<name>`` (``~/.cache`` when unset)."""
    if path is not None:
        return os.fspath(path)
    env = os.environ.get(env_var)
    if env:
        return None if env.lower() == "off" else env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vc4nn", name)
