"""The registry applies, records and reverts patches to the identical objects."""

import types

import pytest

from transfer.errors import TransferError
from transfer.registry import Registry


class Base:
    def method(self):
        return "base"


class Child(Base):
    def own(self):
        return "own"


def test_replace_and_revert_restore_identical_objects():
    module = types.ModuleType("m")
    module.fn = fn = lambda: 1
    own = Child.__dict__["own"]
    reg = Registry()
    reg.replace("t.fn", module, "fn", lambda: 2)
    reg.replace("t.inherited", Child, "method", lambda self: "patched")
    reg.replace("t.own", Child, "own", lambda self: "patched")
    reg.replace("t.new", module, "added", 3)
    assert module.fn() == 2 and Child().method() == "patched" and Child().own() == "patched"
    assert reg.is_patched(Child, "method") and reg.get_original(module, "fn") is fn
    reg.revert_all()
    assert module.fn is fn
    assert "method" not in Child.__dict__ and Child().method() == "base"  # inherited again
    assert Child.__dict__["own"] is own
    assert not hasattr(module, "added")
    assert reg.names() == []


def test_disabled_names_and_areas_are_skipped():
    module = types.ModuleType("m")
    module.a = module.b = 0
    reg = Registry(disabled=["area.a", " other "])
    assert reg.replace("area.a", module, "a", 1) is None
    assert reg.replace("area.b", module, "b", 1) is not None
    assert reg.replace("other.x", module, "a", 1) is None
    assert (module.a, module.b) == (0, 1)


def test_double_patch_is_an_error_and_undo_callbacks_run():
    module = types.ModuleType("m")
    module.a = 0
    reg = Registry()
    reg.replace("x.a", module, "a", 1)
    with pytest.raises(TransferError):
        reg.replace("x.a2", module, "a", 2)
    seen = []
    reg.on_revert("x.undo", lambda: seen.append(1))
    reg.revert_all()
    assert seen == [1] and module.a == 0


def test_wrap_uses_wrapt_and_reverts():
    import wrapt

    module = types.ModuleType("m")

    def f(x):
        return x

    module.f = f
    reg = Registry()
    reg.wrap("w.f", module, "f", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs) * 10)
    assert isinstance(module.f, wrapt.FunctionWrapper) and module.f(2) == 20
    reg.revert_all()
    assert module.f is f


def test_replace_when_imported_waits_for_the_module_and_not_after_revert(tmp_path, monkeypatch):
    (tmp_path / "lazy_mod_for_transfer_test.py").write_text("class Thing:\n    def answer(self):\n        return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry()
    registry.replace_when_imported("lazy.answer", "lazy_mod_for_transfer_test", "Thing", "answer",
                                   lambda original: lambda self: original(self) + 41)
    assert registry.names() == []  # not imported yet: nothing patched
    import lazy_mod_for_transfer_test as lazy

    original = registry.get_original(lazy.Thing, "answer")
    assert original.__qualname__ == "Thing.answer"
    assert lazy.Thing().answer() == 42 and registry.names() == ["lazy.answer"]
    registry.revert_all()
    assert lazy.Thing.__dict__["answer"] is original and lazy.Thing().answer() == 1

    # A registry reverted before the import never patches it.
    late = Registry()
    late.replace_when_imported("lazy.other", "lazy_mod_for_transfer_test2", "Thing", "answer",
                               lambda original: lambda self: 0)
    late.revert_all()
    (tmp_path / "lazy_mod_for_transfer_test2.py").write_text("class Thing:\n    def answer(self):\n        return 1\n")
    import lazy_mod_for_transfer_test2 as lazy2

    assert lazy2.Thing().answer() == 1 and late.names() == []
