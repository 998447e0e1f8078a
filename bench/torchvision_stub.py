"""A stand-in for torchvision, so that timm imports on a machine where torchvision cannot be
installed.

timm imports torchvision at import time (image transforms, datasets, a frozen batch norm), but its
`VisionTransformer` uses none of it. On the book's CPU machines torchvision has no build that
matches the local CPU wheel of torch, so `bench/bench_vit_vs_timm.py` installs this finder when
`import torchvision` fails: every `torchvision.*` module then exists, and every name in it is a
class that raises as soon as anything builds it. So a timm model that really needs torchvision fails
loudly; the ViT never touches it. Never installed when the real torchvision imports.
"""
import importlib.abc, importlib.machinery, sys, types


class _Stub(type):
    """The metaclass of every stand-in: any attribute (an enum member, a nested class) is another
    stand-in"""
    def __getattr__(cls, name):
        if name.startswith("__"): raise AttributeError(name)
        return _Stub(name, (_Missing,), {})

    def __hash__(cls): return id(cls)


class _Missing(metaclass=_Stub):
    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__name__}: torchvision is not installed "
                           "(bench/torchvision_stub.py)")


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"): raise AttributeError(name)
        return _Stub(name, (_Missing,), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _Module(spec.name)
        mod.__path__, mod.__version__ = [], "0.0+stub"
        return mod

    def exec_module(self, module):
        pass


def install() -> bool:
    "Put the stand-in on sys.meta_path if torchvision does not import; True if it was installed"
    try:
        import torchvision  # noqa: F401
        return False
    except ImportError:
        sys.meta_path.insert(0, _Finder())
        return True
