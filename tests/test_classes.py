"""Whole classes shaped by their ideas (CONTRIBUTING.md, rule 4).

- Every public class's constructor lists its parameters: no `**kwargs` passed through, so that
  `show_doc`, an IDE and `help()` show them all.
- A class of the package that is the base of exactly one other class of the package exists only if
  the book uses it on its own (the package builds one somewhere, or its docstring says "on its
  own"); otherwise it is a split made to shorten a cell. A subclass's `forward` accepts every
  argument of its base's.
- Methods live in the class body: no function assigned to a class attribute from outside it.
"""
import importlib, inspect, pkgutil, re
from pathlib import Path

import pytest
import txbook

MODULES = [importlib.import_module(f"txbook.{m.name}")
           for m in pkgutil.iter_modules(txbook.__path__) if not m.name.startswith("_")]
CLASSES = {c for mod in MODULES for name, c in vars(mod).items()
           if inspect.isclass(c) and c.__module__ == mod.__name__ and not name.startswith("_")}


@pytest.mark.parametrize("cls", sorted(CLASSES, key=lambda c: (c.__module__, c.__name__)),
                         ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_constructor_lists_its_parameters(cls):
    if "__init__" not in vars(cls) or getattr(cls, "_is_protocol", False):
        # dataclasses' and NamedTuples' are generated; a Protocol builds nothing
        return
    params = inspect.signature(cls.__init__).parameters.values()
    var_kw = [p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    assert not var_kw, (
        f"{cls.__qualname__}.__init__ passes **{var_kw[0]} through: list the parameters"
    )


SOURCE = "\n".join(p.read_text() for p in Path(txbook.__file__).parent.glob("*.py")
                   if p.name != "_modidx.py")


def built_alone(cls) -> bool:
    "The package builds `cls` itself somewhere (a call `Name(`, not a `class X(Name)` statement)"
    calls = re.findall(rf"(?<![\w.]){cls.__name__}\(", SOURCE)
    bases = re.findall(rf"^class \w+\({cls.__name__}\b", SOURCE, re.M)
    return len(calls) > len(bases)


def test_no_base_class_for_one_subclass_only():
    lonely = []
    for base in CLASSES:
        subs = [c for c in CLASSES if base in c.__bases__]
        if len(subs) == 1 and "on its own" not in (base.__doc__ or "") and not built_alone(base):
            lonely.append(f"{base.__qualname__} -> {subs[0].__qualname__}")
    assert not lonely, (
        f"base classes with one subclass that the book does not use on their own: {lonely}"
    )


def test_methods_are_defined_in_the_class_body():
    borrowed = []
    for cls in CLASSES:
        for name, attr in vars(cls).items():
            fn = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
            if inspect.isfunction(fn) and not fn.__qualname__.startswith(cls.__qualname__ + ".") \
                    and not name.startswith("__"):
                borrowed.append(f"{cls.__qualname__}.{name} = {fn.__qualname__}")
    assert not borrowed, f"methods assigned from functions defined outside the class: {borrowed}"


def test_subclass_forward_accepts_the_base_arguments():
    narrowed = []
    for sub in CLASSES:
        for base in sub.__bases__:
            if base not in CLASSES or "forward" not in vars(sub) \
                    or not getattr(base.forward, "__module__", "").startswith("txbook"):
                continue
            mine = inspect.signature(sub.forward).parameters
            theirs = [p for p in inspect.signature(base.forward).parameters.values()
                      if p.name != "self"]
            takes_kw = any(p.kind is p.VAR_KEYWORD for p in mine.values())
            lost = [p.name for p in theirs if p.name not in mine and not takes_kw]
            if lost:
                narrowed.append(f"{sub.__qualname__}.forward drops {lost} of "
                                f"{base.__qualname__}.forward")
    assert not narrowed, narrowed
