"""Stack or swap: which profiles the planner lets run side by side, and each one's memory share.

Every profile is planned as the planner plans it (:func:`kvpilot.core.fit.calibrate.
planned_capacity`, this GPU's measurements included). From its capacity, :class:`ProfileNeed`
keeps two sizes: the ``floor`` it needs to start at all (the weights, the non-torch memory, the
activation peak and the CUDA graphs, plus KV for one request of ``max_model_len`` tokens, the
least vLLM starts with) and what its settings ``want`` (KV for ``max_num_seqs`` such requests).
A profile that fixes its own utilization or KV size has one size: that.

:func:`split` gives a set of profiles the card's budget (its total times the utilization the
planner plans with on the memory free now): each gets its floor, and what is left is shared in
proportion to what each wants beyond its floor, never more than it wants. The set stacks when the
floors fit together; the share is passed to vLLM as ``--gpu-memory-utilization`` (share / total).
On vLLM's CPU backend the shares are not passed (the backend sizes its KV by the profile's own
setting), but the same arithmetic decides whether the profiles fit in the host memory together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvpilot.core.base.units import GiB

if TYPE_CHECKING:
    from kvpilot.core.base.plan import Capacity

#: terms of a capacity that are not memory held by the server (the budget and the KV pool)
_NOT_HELD = ("requested", "kv_cache")
#: utilization is rounded down to this many decimals (vLLM takes a float; 0.001 of 24 GiB is 24 MiB)
_UTIL_DECIMALS = 3


@dataclass(frozen=True)
class ProfileNeed:
    """What one profile needs on the card, in bytes.

    ``floor_bytes``: the least it starts with; ``want_bytes``: what its settings ask for
    (>= floor); ``asleep_bytes``: what its process keeps while asleep (the non-torch memory:
    CUDA context and the allocator's own); ``fixed``: the profile fixes its own utilization or
    KV size, so its share is not changed (floor == want).
    """

    name: str
    floor_bytes: int
    want_bytes: int
    asleep_bytes: int = 0
    fixed: bool = False


@dataclass(frozen=True)
class Split:
    """The planner's answer for a set of profiles on one card.

    ``fits``: the floors fit together in ``budget_bytes`` next to ``held_bytes`` already held;
    ``share_bytes``: each profile's share (empty when it does not fit); ``reason``: one sentence.
    """

    fits: bool
    budget_bytes: int
    held_bytes: int
    share_bytes: Mapping[str, int] = field(default_factory=dict)
    reason: str = ""

    def utilization(self, name: str, total_bytes: int) -> float:
        """``name``'s share as vLLM's ``--gpu-memory-utilization`` (rounded down)."""
        scale = 10**_UTIL_DECIMALS
        return int(self.share_bytes[name] / total_bytes * scale) / scale


def need_of(name: str, capacity: Capacity, *, fixed_utilization: bool = False,
            fixed_kv: bool = False) -> ProfileNeed:
    """The :class:`ProfileNeed` of a profile planned as ``capacity``.

    ``fixed_utilization``: the profile fixes its utilization, so it needs what it requests;
    ``fixed_kv``: it fixes its KV size, so it needs the held terms plus that KV.
    """
    held = sum(t.bytes for t in capacity.terms if t.name not in _NOT_HELD and t.bytes)
    per_request = capacity.kv_bytes_per_token * capacity.max_model_len
    asleep = next((t.bytes for t in capacity.terms if t.name == "non_torch"), 0) or 0
    if fixed_utilization:
        return ProfileNeed(name, capacity.requested_bytes, capacity.requested_bytes, asleep,
                           fixed=True)
    if fixed_kv:
        size = held + max(capacity.available_kv_bytes, 0)
        return ProfileNeed(name, size, size, asleep, fixed=True)
    floor = held + per_request
    want = held + per_request * max(1, capacity.max_num_seqs)
    return ProfileNeed(name, floor, max(floor, want), asleep)


def split(
    needs: Sequence[ProfileNeed], budget_bytes: int, *, held_bytes: int = 0
) -> Split:
    """Shares of ``budget_bytes`` for ``needs`` next to ``held_bytes`` other servers hold."""
    free = budget_bytes - held_bytes
    floors = sum(n.floor_bytes for n in needs)
    names = ", ".join(n.name for n in needs)
    if floors > free:
        parts = " + ".join(f"{n.name} {n.floor_bytes / GiB:.2f}" for n in needs)
        return Split(False, budget_bytes, held_bytes, {}, (
            f"{names} need {parts} = {floors / GiB:.2f} GiB to start, and "
            f"{free / GiB:.2f} GiB of the {budget_bytes / GiB:.2f} GiB budget is free"
        ))
    left = free - floors
    extra = {n.name: 0 if n.fixed else n.want_bytes - n.floor_bytes for n in needs}
    wanted_extra = sum(extra.values())
    shares: dict[str, int] = {}
    for n in needs:
        if wanted_extra <= left or wanted_extra == 0:
            shares[n.name] = n.floor_bytes + extra[n.name]
        else:
            shares[n.name] = n.floor_bytes + left * extra[n.name] // wanted_extra
    used = sum(shares.values())
    return Split(True, budget_bytes, held_bytes, shares, (
        f"{names} fit together: {used / GiB:.2f} GiB of the {free / GiB:.2f} GiB free"
    ))
