"""One registry that applies, records and reverts every patch.

Each patch area (a module under `transfer.patches`) asks the registry to
replace attributes; the registry remembers the exact original object it found
(in the owner's own ``__dict__`` or inherited through the MRO) and the
replacement it installed, and puts the original back on `revert_all`.
Changes that are not attribute assignments (environment variables,
torch.library registrations) register an undo callable. Like gevent.monkey,
it answers `get_original` and `is_patched`.

Only what is still ours is restored. At `revert_all` each attribute is
compared (by identity) with the replacement the registry installed:

* still ours: the original goes back, as it was found;
* back to the original already (someone restored it): nothing to do;
* anything else: someone patched it after us. It is left in place, never
  overwritten: restoring would silently drop that other patch, and when its
  owner later undoes it, it would put our replacement back over torch's
  original. One WARNING per attribute names it and what holds it now. When
  the newer object reaches our replacement through ``__wrapped__`` (a
  `functools.wraps` closure or a wrapt wrapper around ours: a chain), the
  warning says that calls through it are still translated; transfer does not
  reach into another patcher's object to cut the chain (a wrapt proxy could
  be re-pointed, a closure cannot, and neither is ours to change).

Such a record is kept as *left behind* (process-wide): once our replacement
is back in place (the other patch was undone), `revert_left_behind` restores
the original. It runs at the end of every `revert_all`, at
`transfer.uninstall()` with nothing active, and at the start of
`transfer.install()`, so a new install never takes our stale replacement for
torch's original.

`rebind_copies` extends the patches to copies bound before install (``from
torch.cuda import device_count`` in a module imported earlier): see there.
`check_disabled` rejects TRANSFER_DISABLE names that no patch asked for.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import sys
import threading
import types
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set

import wrapt

from .errors import TransferError
from .presentation import PathWrapper, present

MISSING = object()

logger = logging.getLogger("transfer")


class Record:
    """One applied patch: `owner.attribute` now holds `replacement`."""

    __slots__ = ("name", "owner", "attribute", "original", "replacement", "own")

    def __init__(self, name: str, owner: Any, attribute: str, original: Any, replacement: Any, own: Any):
        self.name = name  # "<area>.<item>", the key TRANSFER_DISABLE matches
        self.owner = owner
        self.attribute = attribute
        self.original = original  # the object found before patching (raw, unbound)
        self.replacement = replacement
        self.own = own  # what owner.__dict__ held before, or MISSING if it was inherited/absent

    def __repr__(self) -> str:
        return f"<Record {self.name}: {self.describe()}>"

    def describe(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", repr(self.owner))
        module = getattr(self.owner, "__module__", None)
        if inspect.isclass(self.owner) and module:
            owner = f"{module}.{owner}"
        return f"{owner}.{self.attribute}"


def _prefixes(name: str) -> List[str]:
    """"a.b.c" -> ["a", "a.b", "a.b.c"]: the names whose disabling disables `name`."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


class Registry:
    """Applies, records and reverts patches; honours a set of disabled names.

    A name is disabled when it, or a part of it up to a dot, is in `disabled`:
    ``TRANSFER_DISABLE=tensor`` skips every Tensor patch, ``TRANSFER_DISABLE=tensor.is_cuda``
    only that one, and ``collectives.all_reduce`` also ``collectives.all_reduce.c10d``
    (the same function's other home, `torch.distributed.distributed_c10d`).
    """

    def __init__(self, disabled: Iterable[str] = ()):
        self.disabled = frozenset(n.strip() for n in disabled if n.strip())
        # (id(owner), attribute) -> record, in the order applied. Keyed by id(): the
        # record holds `owner`, so the id cannot be reused meanwhile.
        self._records: Dict[tuple, Record] = {}
        self._undo: List[tuple] = []  # (name, callable)
        self._lock = threading.RLock()
        self._reverted = False  # set by revert_all: late post-import hooks do nothing
        self._asked: Set[str] = set()  # every name a patch asked about: TRANSFER_DISABLE's vocabulary

    def enabled(self, name: str) -> bool:
        self._asked.add(name)
        return not any(prefix in self.disabled for prefix in _prefixes(name))

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
            original = MISSING
            if hasattr(owner, attribute) or _has_in_mro(owner, attribute):
                _, _, original = wrapt.resolve_path(owner, attribute)
            own = vars(owner).get(attribute, MISSING) if hasattr(owner, "__dict__") else MISSING
            # Named as the original and picklable by reference to owner.attribute (presentation.py).
            replacement = present(owner, attribute, None if original is MISSING else original, replacement)
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

    @property
    def reverted(self) -> bool:
        """True once `revert_all` ran: a replacement that a module bound by name answers as the original."""
        return self._reverted

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

    def when_imported(self, name: str, module: str, action: Callable[[Any], None]) -> None:
        """Call ``action(module)`` now, or when `module` is imported, unless reverted by then.

        For changes that are not an attribute assignment (`action` registers its
        own undo with `on_revert`); `replace_when_imported` is the attribute case.
        """
        if not self.enabled(name):
            return

        def on_import(loaded):
            with self._lock:
                if not self._reverted:
                    action(loaded)

        wrapt.register_post_import_hook(on_import, module)

    def layer(self, record: Record, layer: Any) -> None:
        """Install `layer` (built over `record`'s replacement: the call-site log's) in its place.

        The record keeps its original: `revert_all` restores it as for any record, and
        `get_original` / `is_patched` answer as before.
        """
        with self._lock:
            setattr(record.owner, record.attribute, layer)
            record.replacement = layer

    def on_revert(self, name: str, undo: Callable[[], None]) -> None:
        """Remember `undo` for a change that is not an attribute assignment."""
        with self._lock:
            self._undo.append((name, undo))

    def revert_one(self, owner: Any, attribute: str) -> bool:
        """Restore one patch's original now, while the rest stay (a watch that has seen what it watched for:
        patches/vendor_ops.py); only while the attribute still holds our replacement. True when restored."""
        with self._lock:
            record = self.record_for(owner, attribute)
            if record is None or _current(owner, attribute) is not record.replacement:
                return False
            _restore(record)
            del self._records[(id(owner), attribute)]
            return True

    def revert_all(self) -> None:
        """Undo everything, newest first, restoring the identical originals where
        the attribute still holds our replacement (module docstring)."""
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
                current = _current(record.owner, record.attribute)
                if current is record.replacement:
                    _restore(record)
                elif current is not record.own:  # not ours, and not the original either
                    _leave_behind(record, current)
            self._records.clear()
            revert_left_behind()
            if errors:
                raise TransferError("could not revert: " + "; ".join(errors))

    def rebind_copies(self, area: str, skip: Callable[[str], bool]) -> int:
        """Point copies of patched originals bound before install at the replacements.

        ``from torch.cuda import device_count`` in a module imported before
        `install` binds torch's original in that module; so does ``from torch
        import zeros``. As MindSpeed's patch manager does, every module in
        `sys.modules` whose attribute of the same name holds (by identity) the
        original of a patched module attribute gets the replacement, recorded
        as ``<area>.<module>.<attribute>`` and restored on `revert_all` like
        any patch (only while it still holds the replacement). Modules for
        which `skip(module name)` is true (torch's own, transfer's, the vendor
        plug-ins) are not touched, nor are copies under another name (``from
        torch.cuda import device_count as n_gpus``; a patcher's saved
        ``_orig_zeros``): the name is what tells a copy from a kept original.
        Where two patched owners share one original (torch.distributed and
        distributed_c10d), the copy gets the replacement on the shorter module
        path (the public one). Returns the number of copies rebound.

        Cost: one C-level set test per module against the ~140 patched names;
        5-7 ms with 2,473 modules (103k names) loaded, torch 2.13 with
        transformers 5.23's Trainer and four model modules, on a busy 2-core
        machine; first install there takes about 1.1 s.
        """
        with self._lock:
            by_name: Dict[str, Dict[int, Record]] = {}
            for record in self._records.values():
                if not isinstance(record.owner, types.ModuleType) or record.original is MISSING:
                    continue
                if record.name.split(".", 1)[0] == area:
                    continue
                same = by_name.setdefault(record.attribute, {})
                other = same.get(id(record.original))
                if other is None or len(record.owner.__name__) < len(other.owner.__name__):
                    same[id(record.original)] = record
            names = frozenset(by_name)
            count = 0
            for module_name, module in list(sys.modules.items()):
                if not isinstance(module, types.ModuleType) or skip(module_name):
                    continue
                namespace = getattr(module, "__dict__", None)
                if not isinstance(namespace, dict) or names.isdisjoint(namespace):
                    continue
                for attribute in namespace.keys() & names:
                    value = namespace.get(attribute)
                    patched = by_name[attribute].get(id(value))
                    if patched is None or patched.original is not value or patched.owner is module:
                        continue
                    key = (id(module), attribute)
                    name = f"{area}.{module_name}.{attribute}"
                    if key in self._records or not self.enabled(name):
                        continue
                    try:
                        setattr(module, attribute, patched.replacement)
                    except Exception as exc:  # a module type that refuses assignment: leave it
                        logger.debug("transfer: cannot rebind %s.%s: %s", module_name, attribute, exc)
                        continue
                    self._records[key] = Record(name, module, attribute, value, patched.replacement, value)
                    count += 1
            return count

    def check_disabled(self, areas: Sequence[str], where: str = "here") -> None:
        """Raise when TRANSFER_DISABLE names something that is neither an area nor a
        name some patch asked about (`enabled`), with the valid names and the
        closest match. A name under a disabled area is accepted: the area's
        patches never ran to ask. Call it after every patch area has run.

        The vocabulary is this install's: a few patches exist for some targets
        only (``sync_batchnorm.forward`` on cpu, ``distributed.set_device_before_init``
        on sdaa) or some torch versions, and naming one elsewhere is an error
        too (`where` says for which target and torch), as it disables nothing."""
        known = set(areas) | {prefix for name in self._asked for prefix in _prefixes(name)}
        unknown = [n for n in sorted(self.disabled)  # under a disabled name, its patches never asked
                   if n not in known and not any(p in self.disabled and p in known for p in _prefixes(n)[:-1])]
        if not unknown:
            return
        lowered = {k.lower(): k for k in known}
        problems = []
        for name in unknown:
            area, _, rest = name.partition(".")
            close_area = difflib.get_close_matches(area, list(areas), n=1, cutoff=0.6) if area not in areas else []
            if rest and close_area:  # the area is misspelt: keep the rest
                guess = f"{close_area[0]}.{rest}"
            else:
                close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
                guess = lowered[close[0]] if close else None
            hint = f"; did you mean '{guess}'?" if guess else ""
            area = area if rest else None
            if area in areas:
                members = sorted(k for k in self._asked if k.startswith(area + "."))
                hint += (f" The patches of area '{area}' are: {', '.join(members)}." if members
                         else f" Area '{area}' has no patches here.")
            problems.append(f"'{name}' is not an area or patch of transfer {where}{hint}")
        raise TransferError(
            f"TRANSFER_DISABLE={','.join(sorted(self.disabled))}: {' '.join(problems)} "
            f"The areas are: {', '.join(areas)}; transfer.status()['patches'] lists every patch applied."
        )

    def record_for(self, owner: Any, attribute: str) -> Optional[Record]:
        return self._records.get((id(owner), attribute))

    def is_patched(self, owner: Any, attribute: str) -> bool:
        return self.record_for(owner, attribute) is not None

    def get_original(self, owner: Any, attribute: str) -> Any:
        """The object `owner.attribute` held before `transfer` patched it."""
        record = self.record_for(owner, attribute)
        if record is None:
            return getattr(owner, attribute)
        if record.original is MISSING:
            raise AttributeError(f"{owner!r} had no attribute {attribute!r} before patching")
        return record.original

    def names(self) -> List[str]:
        return [r.name for r in self._records.values()] + [n for n, _ in self._undo]

    def records(self) -> List[Record]:
        return list(self._records.values())


def _has_in_mro(owner: Any, attribute: str) -> bool:
    return inspect.isclass(owner) and any(attribute in vars(c) for c in inspect.getmro(owner))


def _current(owner: Any, attribute: str) -> Any:
    """What `owner` itself holds for `attribute` now (not inherited), or MISSING."""
    if hasattr(owner, "__dict__"):
        return vars(owner).get(attribute, MISSING)
    return getattr(owner, attribute, MISSING)


def _restore(record: Record) -> None:
    if record.own is MISSING:
        try:
            delattr(record.owner, record.attribute)
        except AttributeError:
            pass
        if record.original is not MISSING and not hasattr(record.owner, record.attribute):
            setattr(record.owner, record.attribute, record.original)
    else:
        setattr(record.owner, record.attribute, record.own)


# Records whose attribute was patched again after us when their registry reverted (module docstring).
_LEFT_BEHIND: List[Record] = []
_LEFT_LOCK = threading.RLock()


def _leave_behind(record: Record, current: Any) -> None:
    where = record.describe()
    if current is MISSING:
        now = "it was deleted"
    else:
        now = f"it now holds {_describe(current)}"
    if _reaches(current, record.replacement):
        logger.warning(
            "transfer.uninstall(): %s was patched again after transfer (%s, which calls transfer's replacement "
            "through __wrapped__); left in place, so calls through it are still translated. Remove that patch, "
            "then call transfer.uninstall() again to restore torch's original.", where, now)
    else:
        logger.warning(
            "transfer.uninstall(): %s was changed after transfer patched it (%s); left as it is, since it is no "
            "longer transfer's. Should that change be undone and put transfer's replacement back, "
            "transfer.uninstall() restores the original then.", where, now)
    with _LEFT_LOCK:
        _LEFT_BEHIND.append(record)


def revert_left_behind() -> None:
    """Restore the originals of left-behind records whose attribute holds our
    replacement again; forget those restored by someone else. No warning again."""
    with _LEFT_LOCK:
        for record in list(_LEFT_BEHIND):
            current = _current(record.owner, record.attribute)
            if current is record.replacement:
                _restore(record)
                _LEFT_BEHIND.remove(record)
            elif current is record.own:
                _LEFT_BEHIND.remove(record)


def _reaches(obj: Any, target: Any) -> bool:
    """True when following ``__wrapped__`` from `obj` (functools.wraps, wrapt) reaches `target`."""
    seen = set()
    for _ in range(100):
        try:
            obj = getattr(obj, "__wrapped__", MISSING)
        except Exception:  # a proxy whose attribute access fails
            return False
        if obj is MISSING or id(obj) in seen:
            return False
        if obj is target:
            return True
        seen.add(id(obj))
    return False


def _describe(obj: Any) -> str:
    """Where `obj` was defined: wrappers copy the names of what they wrap, so the code tells."""
    function = getattr(obj, "_self_wrapper", obj) if isinstance(obj, wrapt.ObjectProxy) else obj
    code = getattr(function, "__code__", None)
    kind = f"a {type(obj).__name__}"
    if isinstance(code, types.CodeType):
        return f"{kind} defined at {code.co_filename}:{code.co_firstlineno}"
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None)
    return f"{kind} {module}.{name}" if isinstance(module, str) and isinstance(name, str) else kind
