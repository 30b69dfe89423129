"""What the runtime needs of a Fulcrum plan: the layout, the stages, the recomputation and each rank's program."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

from fulcrum import _core
from fulcrum.runtime.encoder import EncoderLayout

PlanSource = Union[str, os.PathLike, Mapping[str, Any], "RuntimePlan"]


def parse_document(document: Union[str, Mapping[str, Any]], where: str) -> dict:
    """A schedule or plan as a dict: parsed from text (ValueError naming ``where`` and the place of malformed
    JSON) or copied from a mapping."""
    if not isinstance(document, str):
        return dict(document)
    try:
        doc = json.loads(document)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    return doc


def read_schedule(source, from_json):
    """``from_json(document)`` of parsed JSON, or ``from_json(text, path)`` of the file ``source`` names (its path
    then names it in errors)."""
    if isinstance(source, Mapping):
        return from_json(source)
    path = os.fspath(source)
    with open(path, encoding="utf-8") as f:
        return from_json(f.read(), path)


@dataclass(frozen=True)
class RuntimePlan:
    """A schedule as the runtime runs it.

    ``stages`` are the virtual stages' ``[first, end)`` ranges of the flattened layer chain (``pp × vpp`` of them;
    stage ``s`` runs on pipeline rank ``s % pp``), ``recompute`` one mode per layer (``none``, ``selective``,
    ``full``), ``programs`` the instruction list of each pipeline rank in Fulcrum's schedule JSON form. With an
    ``encoder`` section, the stages cover the layers after the encoders', which run on their own plan.
    """

    pipeline: str
    dp: int
    pp: int
    vpp: int
    micro_batches: int
    stages: tuple
    recompute: tuple
    programs: tuple = field(repr=False)
    text: str = field(repr=False, default="")
    encoder: Optional[EncoderLayout] = None  # the encoders' own plan, their work in the LLM's bubbles
    where: str = field(default="plan", compare=False)  # what errors about it name: its file, where it has one

    def layer_ranks(self, dp_rank: int = 0) -> list[int]:
        """Per layer of the chain, the global rank holding it in data-parallel replica ``dp_rank`` (for an
        encoder layer replicated over encoder pipelines, the one of pipeline 0)."""
        ranks = [-1] * self.layers
        for s, (first, end) in enumerate(self.stages):
            ranks[first:end] = [(s % self.pp) * self.dp + dp_rank] * (end - first)
        if self.encoder is not None:
            for e, (first, end) in enumerate(self.encoder.stages):
                ranks[first:end] = [self.encoder.rank_of(0, e) * self.dp + dp_rank] * (end - first)
        return ranks

    @property
    def layers(self) -> int:
        return len(self.recompute)

    @property
    def world_size(self) -> int:
        return self.dp * self.pp

    def stages_of(self, pipeline_rank: int) -> list[int]:
        """The virtual stages pipeline rank ``pipeline_rank`` runs, in order."""
        return [s for s in range(len(self.stages)) if s % self.pp == pipeline_rank]

    @classmethod
    def from_json(cls, document: Union[str, Mapping[str, Any]], where: str = "plan") -> "RuntimePlan":
        """From a schedule (``fulcrum simulate --save-schedule``) or a plan (``fulcrum plan --out``) holding one,
        as text or parsed JSON. The schedule is validated by the core first (ValueError naming ``where``)."""
        doc = parse_document(document, where)
        schedule = doc.get("schedule", doc) if doc.get("kind") != "schedule" else doc
        if not isinstance(schedule, Mapping) or schedule.get("kind") != "schedule":
            raise ValueError(f"{where}: neither a schedule nor a plan holding one")
        if "tasks" in schedule:
            raise ValueError(f"{where}: a multitask schedule (waves of task slices): run it with WaveRuntime")
        text = json.dumps(schedule)
        _core.check_schedule(text, where)
        layout = schedule["layout"]
        if int(layout.get("tp", 1)) != 1:
            raise ValueError(f"{where}: the runtime runs TP 1 plans; this one has TP {layout['tp']}")
        modes: list[str] = []
        for mode, count in schedule["recompute"]:
            modes.extend([str(mode)] * int(count))
        return cls(pipeline=str(schedule["pipeline"]), dp=int(layout["dp"]), pp=int(layout["pp"]),
                   vpp=int(layout["vpp"]), micro_batches=int(schedule["micro_batches"]),
                   stages=tuple((int(a), int(b)) for a, b in schedule["stages"]), recompute=tuple(modes),
                   programs=tuple(tuple(tuple(i) for i in p) for p in schedule["programs"]), text=text,
                   encoder=EncoderLayout.from_json(schedule["encoder"], int(layout["pp"]), where)
                   if "encoder" in schedule else None, where=where)

    @classmethod
    def load(cls, source: PlanSource) -> "RuntimePlan":
        return source if isinstance(source, RuntimePlan) else read_schedule(source, cls.from_json)

    @classmethod
    def generate(cls, pipeline: str, layers: int, micro_batches: int, *, pp: int = 1, vpp: int = 1, dp: int = 1,
                 stages: Optional[Sequence[Sequence[int]]] = None,
                 recompute: Union[str, Sequence[str]] = "none") -> "RuntimePlan":
        """One of Fulcrum's generated schedules (``gpipe``, ``1f1b``, ``interleaved``, ``zb-h1``) over ``layers``
        layers: ``stages`` given, or cut into ``pp × vpp`` stages of as equal a layer count as possible."""
        count = pp * vpp
        if stages is None:
            if layers < count:
                raise ValueError(f"{layers} layers cannot fill {count} stages")
            base, extra = divmod(layers, count)
            cuts, at = [], 0
            for s in range(count):
                n = base + (1 if s >= count - extra else 0)
                cuts.append((at, at + n))
                at += n
            stages = cuts
        modes = [recompute] * layers if isinstance(recompute, str) else list(recompute)
        text = _core.pipeline_schedule(pipeline, micro_batches, [tuple(s) for s in stages], modes, dp=dp, pp=pp,
                                       vpp=vpp)
        return cls.from_json(text, f"generated {pipeline} schedule")

    @classmethod
    def data_parallel(cls, layers: int, micro_batches: int, dp: int, recompute: Union[str, Sequence[str]] = "none"):
        """Pure data parallelism: one stage holding every layer, replicated on ``dp`` ranks."""
        return cls.generate("1f1b", layers, micro_batches, dp=dp, recompute=recompute)
