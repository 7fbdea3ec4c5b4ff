"""What a launch does about servers an earlier kvpilot left running (orphans), and its port.

One policy for ``kvpilot serve`` and the window: a server left running may still be loading and
not listen yet, so its port counts as taken all the same.

- no orphan: launch on the port asked for (none asked: the first free from 8000);
- the user asked to stop them (``--stop-orphans``): stop them first, then decide again;
- an orphan holds the port asked for: refuse, naming it and the way out;
- else: launch beside them, on the port asked for or the first free one none of them holds.

A port asked for that something else listens on is refused too. vLLM's start-up check, made
with the free memory read right before the launch, is what keeps a second server from fighting
an orphan for the same GPU's memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvpilot.core.base.words import counted
from kvpilot.core.vllm.command import find_free_port, port_is_free
from kvpilot.core.vllm.orphans import OrphanServer

#: the first port tried when none was asked for
DEFAULT_PORT = 8000

#: :attr:`OrphanDecision.action`: no orphan runs, launch on :attr:`OrphanDecision.port`
LAUNCH = "launch"
#: stop the orphans first, then decide again
STOP_FIRST = "stop_first"
#: orphans run, launch beside them on :attr:`OrphanDecision.port`
BESIDE = "beside"
#: do not launch (an orphan or another program holds the port asked for)
REFUSE = "refuse"


@dataclass(frozen=True)
class OrphanWords:
    """How a face names the ways out of a refusal: ``stop`` (stopping the orphan first:
    a flag, a button) and ``other_port`` (choosing another port: a flag, a profile field)."""

    stop: str
    other_port: str


#: the command line's ways out (``kvpilot serve``)
COMMAND_LINE_WORDS = OrphanWords("pass --stop-orphans to stop it first", "pick another --port")
#: the window's ways out (its orphan bar offers to watch or stop the server)
WINDOW_WORDS = OrphanWords("adopt it or stop it in the bar above first",
                           "pick another port in the profile")


@dataclass(frozen=True)
class OrphanDecision:
    """What a launch does about the orphans found, and on which port.

    Attributes:
        action: :data:`LAUNCH`, :data:`STOP_FIRST`, :data:`BESIDE` or :data:`REFUSE`.
        port: the port to launch on (None: refused, or decided after the stop).
        orphans: the servers an earlier kvpilot left running, as found.
        sentence: one sentence saying the decision ("" for a plain launch); for a refusal the
            error to show, with the way out in the face's words.
    """

    action: str
    port: int | None
    orphans: tuple[OrphanServer, ...]
    sentence: str = ""

    @property
    def refused(self) -> bool:
        """True when nothing may be launched."""
        return self.action == REFUSE


def found_sentence(orphan: OrphanServer) -> str:
    """One sentence naming an orphan: its pid, port and model."""
    rec = orphan.record
    return (f"found a server left by an earlier kvpilot: pid {rec.pid} on port {rec.port} "
            f"({rec.model})")


def decide_orphans(
    orphans: Sequence[OrphanServer],
    *,
    host: str,
    port: int | None,
    stop: bool,
    words: OrphanWords,
    default_port: int = DEFAULT_PORT,
    port_free: Callable[[str, int], bool] = port_is_free,
    first_free: Callable[[str, int], int] = find_free_port,
) -> OrphanDecision:
    """The decision for a launch on ``host`` asking for ``port`` (None: any) while
    ``orphans`` run; ``stop`` when the user asked to stop them (see the module docstring).

    Raises:
        CommandError: the host cannot be resolved or ``port`` is out of range.
    """
    found = tuple(orphans)
    if stop and found:
        return OrphanDecision(STOP_FIRST, None, found, "stopping the servers an earlier "
                              "kvpilot left running before the launch")
    held = {o.record.port: o for o in found}
    if port is not None:
        if port in held:
            rec = held[port].record
            return OrphanDecision(REFUSE, None, found, (
                f"port {port} belongs to a vLLM server an earlier kvpilot left running "
                f"(pid {rec.pid}, {rec.model}); {words.stop}, or {words.other_port}"))
        if not port_free(host, port):
            return OrphanDecision(REFUSE, None, found, (
                f"port {port} on {host} is already in use; stop what listens there or "
                f"{words.other_port}"))
        chosen = port
    else:
        chosen = first_free(host, default_port)
        while chosen in held:
            chosen = first_free(host, chosen + 1)
    if not found:
        return OrphanDecision(LAUNCH, chosen, found)
    return OrphanDecision(BESIDE, chosen, found, (
        f"launching beside {counted(len(found), 'server')} an earlier kvpilot left running, "
        f"on port {chosen}"))
