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
    # a disabled name disables the names under it (a function's other home: "<name>.c10d"), not its siblings
    assert reg.replace("area.a.c10d", module, "b", 2) is None and module.b == 1
    assert Registry(disabled=["area.a"]).enabled("area.ab")


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


# --- uninstall restores only what is still ours -----------------------------------------------

def _module_with_f():
    module = types.ModuleType("hygiene_m")

    def f(x):
        return x

    module.f = f
    return module, f


def test_revert_leaves_an_attribute_replaced_after_us_and_says_so(caplog):
    module, f = _module_with_f()
    reg = Registry()
    ours = reg.replace("t.f", module, "f", lambda x: x + 1).replacement

    def theirs(x):  # a later patcher, not wrapping ours
        return x * 100

    module.f = theirs
    with caplog.at_level("WARNING", logger="transfer"):
        reg.revert_all()
    assert module.f is theirs  # their patch survives our uninstall
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "hygiene_m.f" in warnings[0].getMessage()
    assert "no longer transfer's" in warnings[0].getMessage()
    # Their undo puts back what they found (ours): the original comes back then, without a second warning.
    from transfer.registry import revert_left_behind

    module.f = ours
    caplog.clear()
    revert_left_behind()
    assert module.f is f and not caplog.records


def test_revert_leaves_a_chain_that_wraps_our_replacement(caplog):
    import functools

    module, f = _module_with_f()
    reg = Registry()
    ours = reg.replace("t.f", module, "f", lambda x: x + 1).replacement

    @functools.wraps(ours)
    def chained(x):  # a later patcher wrapping ours (transfer_to_npu's style)
        return ours(x) * 10

    module.f = chained
    with caplog.at_level("WARNING", logger="transfer"):
        reg.revert_all()
    assert module.f is chained and module.f(1) == 20  # still translated through the chain, as said
    message = caplog.records[-1].getMessage()
    assert "hygiene_m.f" in message and "calls transfer's replacement" in message
    module.f = chained.__wrapped__  # the other patcher undoes its patch
    from transfer.registry import revert_left_behind

    revert_left_behind()
    assert module.f is f


def test_revert_leaves_a_wrapt_chain_around_a_wrapt_replacement(caplog):
    import wrapt

    module, f = _module_with_f()
    reg = Registry()
    reg.wrap("t.f", module, "f", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs) + 1)
    ours = module.f
    wrapt.wrap_function_wrapper(module, "f", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs) * 10)
    later = module.f
    with caplog.at_level("WARNING", logger="transfer"):
        reg.revert_all()
    assert module.f is later and "calls transfer's replacement" in caplog.records[-1].getMessage()
    module.f = later.__wrapped__
    assert module.f is ours
    from transfer.registry import revert_left_behind

    revert_left_behind()
    assert module.f is f


def test_revert_is_silent_where_someone_already_restored_the_original(caplog):
    module, f = _module_with_f()
    reg = Registry()
    reg.replace("t.f", module, "f", lambda x: x + 1)
    reg.replace("t.inherited", Child, "method", lambda self: "patched")
    module.f = f
    del Child.method  # back to the inherited Base.method
    with caplog.at_level("WARNING", logger="transfer"):
        reg.revert_all()
    assert module.f is f and "method" not in Child.__dict__ and not caplog.records


def test_rebind_copies_binds_same_named_copies_and_restores_them():
    owner = types.ModuleType("hygiene_owner")
    owner.count = original = lambda: 0
    user = types.ModuleType("hygiene_user")
    user.count = original  # `from hygiene_owner import count`
    user._saved_count = original  # a kept original under another name
    kept = types.ModuleType("hygiene_kept")
    kept.count = original
    import sys

    sys.modules.update(hygiene_user=user, hygiene_kept=kept)
    try:
        reg = Registry()
        replacement = reg.replace("area.count", owner, "count", lambda: 2).replacement
        assert reg.rebind_copies("copies", lambda name: name == "hygiene_kept") >= 1
        assert user.count is replacement and user._saved_count is original and kept.count is original
        assert "copies.hygiene_user.count" in reg.names()
        reg.revert_all()
        assert user.count is original and owner.count is original
    finally:
        del sys.modules["hygiene_user"], sys.modules["hygiene_kept"]


def test_check_disabled_names_unknown_names_with_a_suggestion():
    module = types.ModuleType("m")
    module.a = 0
    reg = Registry(disabled=["area.aa", "other", "other.b"])
    reg.replace("area.a", module, "a", 1)
    with pytest.raises(TransferError) as info:
        reg.check_disabled(["area", "other"])
    message = str(info.value)
    assert "'area.aa' is not an area or patch" in message and "did you mean 'area.a'" in message
    assert "The patches of area 'area' are: area.a" in message
    assert "'other.b' is not" not in message  # a name under a disabled area: its patches never asked
    valid = Registry(disabled=["area.a", "other"])
    assert valid.replace("area.a", module, "a", 1) is None
    valid.check_disabled(["area", "other"])  # all valid: no error
    nested = Registry(disabled=["area.x", "area.x.y.z"])  # a name above patches that asked, and one under it
    nested.enabled("area.x.y")
    nested.check_disabled(["area"])
