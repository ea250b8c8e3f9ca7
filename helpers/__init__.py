"""The package behind the book's notebooks: launch real distributed jobs, measure, explain."""
from . import compat

compat.check()  # before anything else meets an API the installed torch lacks

from .launch import LaunchError, LaunchStopped, LaunchTimeout, RankError, SharedCoresWarning, launch

__all__ = ["launch", "LaunchError", "LaunchStopped", "LaunchTimeout", "RankError", "SharedCoresWarning", "load_ipython_extension"]


def load_ipython_extension(ipython):
    """``%load_ext helpers`` registers the ``%%torchrun`` cell magic."""
    from .magic import register
    register(ipython)
