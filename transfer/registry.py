"""One registry that applies, records and reverts every patch.

Each patch area (a module under `transfer.patches`) asks the registry to
replace attributes; the registry remembers the exact original object it found
(in the owner's own ``__dict__`` or inherited through the MRO) and puts that
very object back on `revert_all`. Changes that are not attribute assignments
(environment variables, torch.library registrations) register an undo callable.
Like gevent.monkey, it answers `get_original` and `is_patched`.
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional

import wrapt

from .errors import TransferError
from .likeness import PathWrapper, present

_MISSING = object()


class Record:
    """One applied patch: `owner.attribute` now holds `replacement`."""

    __slots__ = ("name", "owner", "attribute", "original", "replacement", "own")

    def __init__(self, name: str, owner: Any, attribute: str, original: Any, replacement: Any, own: Any):
        self.name = name  # "<area>.<item>", the key TRANSFER_DISABLE matches
        self.owner = owner
        self.attribute = attribute
        self.original = original  # the object found before patching (raw, unbound)
        self.replacement = replacement
        self.own = own  # what owner.__dict__ held before, or _MISSING if it was inherited/absent

    def __repr__(self) -> str:
        return f"<Record {self.name}: {self.describe()}>"

    def describe(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", repr(self.owner))
        module = getattr(self.owner, "__module__", None)
        if inspect.isclass(self.owner) and module:
            owner = f"{module}.{owner}"
        return f"{owner}.{self.attribute}"


class Registry:
    """Applies, records and reverts patches; honours a set of disabled names.

    A name is disabled when it, or its area (the part before the first dot),
    is in `disabled`: ``TRANSFER_DISABLE=tensor`` skips every Tensor patch,
    ``TRANSFER_DISABLE=tensor.is_cuda`` only that one.
    """

    def __init__(self, disabled: Iterable[str] = ()):
        self.disabled = frozenset(n.strip() for n in disabled if n.strip())
        # (id(owner), attribute) -> record, in the order applied. Keyed by id(): the
        # record holds `owner`, so the id cannot be reused meanwhile.
        self._records: Dict[tuple, Record] = {}
        self._undo: List[tuple] = []  # (name, callable)
        self._lock = threading.RLock()
        self._reverted = False  # set by revert_all: late post-import hooks do nothing

    def enabled(self, name: str) -> bool:
        return name not in self.disabled and name.split(".", 1)[0] not in self.disabled

    def replace(self, name: str, owner: Any, attribute: str, replacement: Any) -> Optional[Record]:
        """Set ``owner.attribute = replacement`` and record the original.

        Returns the record, or None when `name` is disabled. Patching the same
        attribute twice is a bug in `transfer` and raises.
        """
        if not self.enabled(name):
            return None
        with self._lock:
            if self.record_for(owner, attribute) is not None:
                raise TransferError(f"{name}: {owner!r}.{attribute} is already patched")
            original = _MISSING
            if hasattr(owner, attribute) or _has_in_mro(owner, attribute):
                _, _, original = wrapt.resolve_path(owner, attribute)
            own = vars(owner).get(attribute, _MISSING) if hasattr(owner, "__dict__") else _MISSING
            # Named as the original and picklable by reference to owner.attribute (likeness.py).
            replacement = present(owner, attribute, None if original is _MISSING else original, replacement)
            wrapt.apply_patch(owner, attribute, replacement)
            record = Record(name, owner, attribute, original, replacement, own)
            self._records[(id(owner), attribute)] = record
            return record

    def wrap(self, name: str, owner: Any, attribute: str, wrapper: Callable) -> Optional[Record]:
        """Wrap ``owner.attribute`` in a wrapt FunctionWrapper calling `wrapper`.

        For calls off the hot path (init_process_group, DDP construction,
        torch.load): wrapt keeps the signature, binding and introspection right
        but costs ~0.45 us a call; `PathWrapper` pickles as ``owner.attribute``.
        """
        if not self.enabled(name):
            return None
        _, _, original = wrapt.resolve_path(owner, attribute)
        return self.replace(name, owner, attribute, PathWrapper(original, wrapper, owner, attribute))

    def replace_when_imported(self, name: str, module: str, owner: str, attribute: str,
                              make_replacement: Callable[[Any], Any]) -> None:
        """Replace ``<module>.<owner>.<attribute>`` now, or when `module` is imported.

        An empty `owner` names the module itself (``<module>.<attribute>``).
        For modules torch imports lazily (torch._dynamo: ~1 s): a wrapt
        post-import hook applies the patch on import, unless `revert_all` ran
        in between. `make_replacement` receives the original and returns the
        replacement, or None to leave it; a missing owner or attribute (another
        torch version) is left alone.
        """
        if not self.enabled(name):
            return

        def on_import(loaded):
            with self._lock:
                if self._reverted:
                    return
                try:
                    target = functools.reduce(getattr, owner.split(".") if owner else (), loaded)
                    original = getattr(target, attribute)
                except AttributeError:
                    return
                if self.record_for(target, attribute) is None:
                    replacement = make_replacement(original)
                    if replacement is not None:
                        self.replace(name, target, attribute, replacement)

        wrapt.register_post_import_hook(on_import, module)

    def on_revert(self, name: str, undo: Callable[[], None]) -> None:
        """Remember `undo` for a change that is not an attribute assignment."""
        with self._lock:
            self._undo.append((name, undo))

    def revert_all(self) -> None:
        """Undo everything, newest first, restoring the identical originals."""
        with self._lock:
            self._reverted = True
            errors = []
            for name, undo in reversed(self._undo):
                try:
                    undo()
                except Exception as exc:  # keep reverting the rest
                    errors.append(f"{name}: {exc}")
            self._undo.clear()
            for record in reversed(list(self._records.values())):
                if record.own is _MISSING:
                    try:
                        delattr(record.owner, record.attribute)
                    except AttributeError:
                        pass
                    if record.original is not _MISSING and not hasattr(record.owner, record.attribute):
                        setattr(record.owner, record.attribute, record.original)
                else:
                    setattr(record.owner, record.attribute, record.own)
            self._records.clear()
            if errors:
                raise TransferError("could not revert: " + "; ".join(errors))

    def record_for(self, owner: Any, attribute: str) -> Optional[Record]:
        return self._records.get((id(owner), attribute))

    def is_patched(self, owner: Any, attribute: str) -> bool:
        return self.record_for(owner, attribute) is not None

    def get_original(self, owner: Any, attribute: str) -> Any:
        """The object `owner.attribute` held before `transfer` patched it."""
        record = self.record_for(owner, attribute)
        if record is None:
            return getattr(owner, attribute)
        if record.original is _MISSING:
            raise AttributeError(f"{owner!r} had no attribute {attribute!r} before patching")
        return record.original

    def names(self) -> List[str]:
        return [r.name for r in self._records.values()] + [n for n, _ in self._undo]

    def records(self) -> List[Record]:
        return list(self._records.values())


def _has_in_mro(owner: Any, attribute: str) -> bool:
    return inspect.isclass(owner) and any(attribute in vars(c) for c in inspect.getmro(owner))
