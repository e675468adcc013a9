"""The registry of what torch_devx changes in the process outside its own objects.

Every change made at import (or by `cuda_mock.enable()`) goes through here with the way to undo
it, grouped by the part that made it: `uninstall()` undoes them all, newest first, and a part can
undo its own group (`cuda_mock.disable()`). What cannot be undone is recorded too, with the
reason, so that `effects()` (and `python -m torch_devx effects`) lists the complete set.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

_INHERITED = object()  # an attribute the owner did not define itself: undone by deleting it


@dataclasses.dataclass
class Effect:
    group: str
    what: str
    undo: Optional[Callable[[], None]]  # None: permanent
    why_permanent: str = ""
    # For an attribute replaced by replace(): its owner and name.
    owner: Any = None
    attr: str = ""


_applied: list[Effect] = []
_permanent: list[Effect] = []


def _owner_name(owner: Any) -> str:
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return getattr(owner, "__name__", repr(owner))


def replace(group: str, owner: Any, name: str, value: Any) -> None:
    """owner.name = value, undone by putting back what the owner itself held (or removing the
    attribute where it was inherited or absent)."""
    original = owner.__dict__.get(name, _INHERITED)

    def undo() -> None:
        if original is _INHERITED:
            if name in owner.__dict__:
                delattr(owner, name)
        else:
            setattr(owner, name, original)

    setattr(owner, name, value)
    _applied.append(Effect(group, f"{_owner_name(owner)}.{name}", undo, owner=owner, attr=name))


def apply(group: str, what: str, do: Callable[[], Any], undo: Callable[[], None]) -> Any:
    """Runs do() and records undo(); an exception from do() records nothing."""
    result = do()
    _applied.append(Effect(group, what, undo))
    return result


def permanent(group: str, what: str, why: str) -> None:
    """Records a change that stays until the process ends, and why."""
    if not any(e.what == what for e in _permanent):
        _permanent.append(Effect(group, what, None, why))


def active(group: str) -> bool:
    return any(e.group == group for e in _applied)


def undo_group(group: Optional[str] = None) -> None:
    """Undoes the changes of one group (all groups: None), newest first. Each undo runs even
    when an earlier one failed; the first failure is raised at the end."""
    failure: Optional[BaseException] = None
    for effect in reversed(list(_applied)):
        if group is not None and effect.group != group:
            continue
        _applied.remove(effect)
        try:
            effect.undo()
        except Exception as error:  # noqa: BLE001 - finish undoing, then report
            failure = failure or error
    if failure is not None:
        raise failure


def effects() -> list[tuple[str, str, bool, str]]:
    """(group, what, undoable, why it is not) of every change in place now, oldest first, then
    the permanent ones."""
    return ([(e.group, e.what, True, "") for e in _applied] +
            [(e.group, e.what, False, e.why_permanent) for e in _permanent])


def at_exit(group: str, callback: Callable[[], None]) -> None:
    """atexit.register(callback), undone by atexit.unregister."""
    import atexit

    apply(group, f"atexit: {callback.__module__}.{callback.__qualname__}",
          lambda: atexit.register(callback), lambda: atexit.unregister(callback))
