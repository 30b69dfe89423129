"""BalancedBatchSampler: Fulcrum's balanced micro-batches as a PyTorch ``batch_sampler``."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from fulcrum import _core

STATE_VERSION = 1


@dataclass(frozen=True)
class StepInfo:
    """Where a micro-batch sits in its optimizer step, and the step's global token count."""

    epoch: int
    step: int  # optimizer step within the epoch
    micro_batch: int  # 0 .. micro_batches - 1 on this rank
    micro_batches: int  # micro-batches per rank in every step
    world_size: int
    step_tokens: int  # loss tokens of the whole step: every rank, every micro-batch
    tokens: int  # loss tokens of this micro-batch

    @property
    def loss_scale(self) -> float:
        """Multiply a micro-batch's summed loss by this to get the step's token mean after DDP averages."""
        return self.world_size / self.step_tokens if self.step_tokens else 0.0


class MicroBatch(list):
    """The sample ids of one micro-batch of this rank (a list of ints), with its ``info``."""

    __slots__ = ("info",)

    def __init__(self, ids: Sequence[int], info: StepInfo):
        super().__init__(ids)
        self.info = info

    def __reduce__(self):  # DataLoader workers receive micro-batches pickled
        return (MicroBatch, (list(self), self.info))

    def __repr__(self) -> str:
        return f"MicroBatch({list.__repr__(self)}, step={self.info.step}, micro_batch={self.info.micro_batch})"


@dataclass(frozen=True)
class _PlanParams:
    """Everything besides the data, seed and epoch that fixes a plan."""

    algo: str
    world_size: int
    global_batch_size: int
    micro_batches: int
    window: int
    drop_last: bool
    oversize: str
    vision_cap: int
    token_cap: int
    passes: int
    search: bool
    cost: Optional[str]


class _SegmentPlan:
    """One planned stretch of an epoch: a BatchPlan over the samples still unseen, in original ids."""

    def __init__(self, core_plan: Optional[_core.BatchPlan], id_map: Optional[np.ndarray],
                 loss_tokens: np.ndarray, params: _PlanParams):
        self.dp = params.world_size
        self.micro_batches = params.micro_batches
        if core_plan is None:  # nothing left to plan
            self.ids, self.begins = np.zeros(0, np.uint32), np.zeros(1, np.uint64)
            self.steps = self.repeated = self.dropped = 0
        else:
            ids = np.asarray(core_plan.sample_ids)
            self.ids = id_map[ids] if id_map is not None else ids
            self.begins = np.asarray(core_plan.begins)
            self.steps = core_plan.steps
            self.repeated = core_plan.repeated
            self.dropped = core_plan.dropped
        per_sample = loss_tokens[self.ids].astype(np.int64)
        # Prefix sums give any micro-batch's and any step's token count in O(1).
        self.prefix = np.concatenate(([0], np.cumsum(per_sample)))
        slots = self.dp * self.micro_batches
        step_edges = self.begins[:: slots]
        self.step_tokens = self.prefix[step_edges[1:]] - self.prefix[step_edges[:-1]]

    def ids_before_step(self, step: int) -> np.ndarray:
        return self.ids[: self.begins[step * self.dp * self.micro_batches]]


def _mix_seed(seed: int, segment: int) -> int:
    """A distinct, reproducible seed for the re-plan of the rest of an epoch (SplitMix64 finaliser)."""
    z = (seed + 0x9E3779B97F4A7C15 * (segment + 1)) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


# The most tokens a sample may count, as in a length file (an unsigned count near 2^64 would wrap to a negative
# one when read as int64).
_MOST_COUNT = 2**31 - 1


def _distributed_rank_and_size() -> Optional[tuple[int, int]]:
    """The process group's rank and size; None when there is none."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _rank_and_world_size(rank: Optional[int], world_size: Optional[int]) -> tuple[int, int]:
    """The arguments, what is missing from the process group; refused where a launcher started several processes
    but none of them can know its own place (a sampler built before init_process_group)."""
    if rank is not None and world_size is not None:
        return rank, world_size
    group = _distributed_rank_and_size()
    if group is not None:
        return (group[0] if rank is None else rank), (group[1] if world_size is None else world_size)
    launched = os.environ.get("WORLD_SIZE", "1")
    if world_size is None and launched.isdigit() and int(launched) > 1:
        raise ValueError(f"WORLD_SIZE is {launched} but torch.distributed is not initialized: build the sampler "
                         "after init_process_group, or pass rank= and world_size=")
    if rank is None and world_size is not None and world_size > 1:
        raise ValueError(f"world_size={world_size} needs rank= too (torch.distributed is not initialized)")
    return (0 if rank is None else rank), (1 if world_size is None else world_size)


def _whole(name: str, value: Any, minimum: int, most: Optional[int] = None) -> int:
    """An integer argument (a bool, float or string is refused rather than truncated) from ``minimum`` to
    ``most``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if most is not None and value > most:
        raise ValueError(f"{name} must be at most {most}, got {value}")
    return int(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


LengthSource = Union[str, os.PathLike, _core.Dataset]


class BalancedBatchSampler:
    """Balanced, deadlock-free micro-batches for data-parallel training, as a DataLoader ``batch_sampler``.

    Every optimizer step gives each of ``world_size`` ranks exactly ``micro_batches`` micro-batches whose
    predicted compute time (image encoder and LLM) is balanced across ranks; every sample appears once per
    epoch (a short last step is completed by repeating a few samples, or dropped with ``drop_last``). Each
    rank plans the whole epoch with the C++ core, so ranks agree without communicating.

    Lengths come from a length file or InternVL-style meta index (``repeat_time`` honoured; ids are positions
    in the concatenation, in index order), a :class:`fulcrum.Dataset`, or arrays (``tokens=`` and ``tiles=``
    or ``vision_tokens=``). Iterating yields :class:`MicroBatch` lists of dataset indices; ``batch.info``
    carries the step's global token count for loss normalisation (:func:`fulcrum.normalize_loss`).

    ``state_dict()`` records the progress through the epoch; ``load_state_dict()`` resumes exactly where it
    stopped, also with a different world size or batch size: the samples not yet seen are re-planned for the
    new ranks, none lost and none repeated. A new iteration starts again from the same point: the epoch's start, as
    DistributedSampler's does, or the loaded state until a pass has run to the end of the epoch.

    A meta index entry whose length file is missing is an error unless ``strict=False``: skipping it would give
    the entries after it other ids than a dataset built from the whole index has.
    """

    def __init__(
        self,
        lengths: Optional[LengthSource] = None,
        *,
        tokens: Optional[Any] = None,
        tiles: Optional[Any] = None,
        vision_tokens: Optional[Any] = None,
        image_flags: Optional[Any] = None,
        loss_tokens: Optional[Any] = None,
        root: Union[str, os.PathLike] = ".",
        strict: bool = True,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        batch_size: int = 4,
        micro_batches: int = 1,
        global_batch_size: Optional[int] = None,
        algo: str = "fulcrum",
        window: int = 8,
        seed: int = 0,
        drop_last: bool = False,
        oversize: str = "error",
        vision_cap: int = 0,
        token_cap: int = 0,
        passes: int = 50,
        search: bool = False,
        cost: Optional[Union[str, os.PathLike]] = None,
    ):
        self.dataset = _load_lengths(lengths, tokens, tiles, vision_tokens, image_flags, root,
                                     _flag("strict", strict))
        n = len(self.dataset)
        if loss_tokens is None:
            self._loss_tokens = np.asarray(self.dataset.tokens)
        else:
            given = np.asarray(loss_tokens)
            if (given.shape != (n,) or not (np.issubdtype(given.dtype, np.integer) or given.dtype == bool
                                            or (np.isfinite(given).all() and (given == np.round(given)).all()))
                    or (n and (given.min() < 0 or given.max() > _MOST_COUNT))):
                raise ValueError(f"loss_tokens must hold {n} whole counts from 0 to {_MOST_COUNT}, one per sample")
            self._loss_tokens = given.astype(np.int64)
        if rank is not None:
            rank = _whole("rank", rank, 0)
        if world_size is not None:
            world_size = _whole("world_size", world_size, 1, _core.MOST_RANKS)
        rank, world_size = _rank_and_world_size(rank, world_size)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        batch_size = _whole("batch_size", batch_size, 1)
        micro_batches = _whole("micro_batches", micro_batches, 1, _core.MOST_MICRO_BATCHES)
        if world_size * micro_batches > _core.MOST_MICRO_BATCHES_PER_STEP:
            raise ValueError(f"world_size × micro_batches = {world_size * micro_batches} micro-batches a step: at "
                             f"most {_core.MOST_MICRO_BATCHES_PER_STEP}")
        if global_batch_size is None:
            global_batch_size = batch_size * micro_batches * world_size
        global_batch_size = _whole("global_batch_size", global_batch_size, 1)
        if global_batch_size < world_size * micro_batches:
            raise ValueError(
                f"global_batch_size {global_batch_size} leaves a micro-batch empty: it needs at least "
                f"world_size × micro_batches = {world_size * micro_batches}")
        if algo not in _core.batcher_names():
            raise ValueError(f"algo must be one of {', '.join(_core.batcher_names())}; got {algo!r}")
        search = _flag("search", search)
        if algo == "isf" and self.dataset.vision_unit == "patch_tokens" and vision_cap == 0 and not search:
            raise ValueError("isf on data that counts vision_tokens needs a vision cap: give vision_cap (patch tokens "
                             "a micro-batch may hold) or search=True")
        if oversize not in ("error", "own-group", "own_group"):
            raise ValueError(f"oversize must be \"error\" or \"own-group\", got {oversize!r}")
        if cost is not None and not os.path.isfile(cost):
            raise ValueError(f"cost file {os.fspath(cost)!r} is not a file")
        self.rank = rank
        self.world_size = world_size
        seed = _whole("seed", seed, 0)
        if seed >= 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        self.seed = seed
        self._params = _PlanParams(
            algo=algo, world_size=world_size, global_batch_size=global_batch_size,
            micro_batches=micro_batches, window=_whole("window", window, 1, _core.MOST_WINDOW_STEPS),
            drop_last=_flag("drop_last", drop_last), oversize=oversize, vision_cap=_whole("vision_cap", vision_cap, 0),
            token_cap=_whole("token_cap", token_cap, 0), passes=_whole("passes", passes, 1, _core.MOST_PASSES),
            search=search, cost=os.fspath(cost) if cost is not None else None)
        self._fingerprint: Optional[str] = None
        self._epoch = 0
        # The epoch so far: finished segments [(params, steps, digest of what they consumed), ...] under other
        # parameters, then ours.
        self._history: list[tuple[_PlanParams, int, str]] = []
        self._expect_digest: Optional[str] = None  # what a loaded state says the current segment consumed
        self._step = 0  # steps of the current segment handed out
        self._pass_start = 0  # the step of the current segment the latest pass started from
        self._plan: Optional[_SegmentPlan] = None
        # An iteration started since the sampler was made, its epoch set or a state loaded: the next one starts
        # again from the same point, the loaded step (_start_step) or, with none, the epoch's start.
        self._started = False
        self._start_step: Optional[int] = None
        self._fresh: Optional[_SegmentPlan] = None  # the epoch's plan from its start, for that next pass
        self._passes = 0  # iterations started: the progress is the sampler's, so only the latest may go on

    # -- PyTorch sampler protocol -------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Like DistributedSampler.set_epoch: another epoch is another seeded order, started from its beginning.
        Setting the epoch the sampler is already in keeps its progress (a resumed run calls it too)."""
        if int(epoch) != self._epoch:
            self._epoch = int(epoch)
            self._restart_epoch()

    def __len__(self) -> int:
        """Micro-batches the next iteration yields on this rank."""
        if self._started and self._start_step is None:  # the next pass is the epoch from its start
            plan = self._fresh_epoch_plan()
            return plan.steps * plan.micro_batches
        step = self._start_step if self._started else self._step
        return (self.plan.steps - step) * self.plan.micro_batches

    def __iter__(self) -> Iterator[MicroBatch]:
        if self._started and self._start_step is None:  # iterated again: the epoch again, as DistributedSampler does
            fresh = self._fresh_epoch_plan()
            self._restart_epoch()
            self._plan = fresh
        elif self._started:  # iterated again after a state was loaded: from the loaded step again
            self._step = self._start_step
        plan = self.plan
        self._pass_start = self._step
        self._started = True
        self._passes += 1
        this_pass = self._passes
        m = plan.micro_batches
        dp = plan.dp
        ids, begins, prefix = plan.ids, plan.begins, plan.prefix
        offset = self._steps_before_segment()
        while self._step < plan.steps:
            step = self._step
            step_tokens = int(plan.step_tokens[step])
            first = (step * dp + self.rank) * m
            for j in range(m):
                if this_pass != self._passes:  # before each micro-batch, and before it counts a step consumed
                    raise RuntimeError("the sampler was iterated again since this iterator started: the progress "
                                       "through the epoch is the sampler's, so only the newest iterator goes on")
                b, e = begins[first + j], begins[first + j + 1]
                info = StepInfo(self._epoch, offset + step, j, m, self.world_size, step_tokens,
                                int(prefix[e] - prefix[b]))
                if j == m - 1:
                    # Counted as consumed once its last micro-batch is handed out, so a checkpoint taken
                    # after the optimizer step resumes at the next step.
                    self._step = step + 1
                yield MicroBatch(ids[b:e].tolist(), info)
        self._start_step = None  # a pass ran to the end of the epoch: the next one is the whole epoch again

    # -- planning -----------------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps in the current epoch (earlier segments of a resumed epoch included)."""
        return self._steps_before_segment() + self.plan.steps

    @property
    def plan(self) -> _SegmentPlan:
        if self._plan is None:
            plan = self._replay()
            if self._step > plan.steps:
                raise ValueError(f"the sampler state is at step {self._step} of a segment of {plan.steps} steps")
            if self._expect_digest is not None and _digest(plan.ids_before_step(self._step)) != self._expect_digest:
                raise ValueError("the sampler state's epoch was planned differently (another cost file or Fulcrum "
                                 "version?): resuming would lose or repeat samples")
            self._expect_digest = None
            self._plan = plan
        return self._plan

    def step_tokens(self, step: int) -> int:
        """Loss tokens of a whole step of the current epoch (every rank, every micro-batch)."""
        local = step - self._steps_before_segment()
        if not 0 <= local < self.plan.steps:
            raise IndexError(f"step {step} is not in the current segment of epoch {self._epoch}")
        return int(self.plan.step_tokens[local])

    def _steps_before_segment(self) -> int:
        return sum(steps for _, steps, _ in self._history)

    def _fresh_epoch_plan(self) -> _SegmentPlan:
        """The plan of the whole epoch under this sampler's parameters (the current one, if it is that)."""
        if not self._history:
            return self.plan
        if self._fresh is None:
            self._fresh = self._plan_segment(self._params, None, 0)
        return self._fresh

    def _restart_epoch(self) -> None:
        self._fresh = None
        self._started = False
        self._start_step = None
        self._expect_digest = None
        self._history = []
        self._step = 0
        self._pass_start = 0
        self._plan = None

    def _plan_segment(self, params: _PlanParams, remaining: Optional[np.ndarray], segment: int) -> _SegmentPlan:
        seed = self.seed if segment == 0 else _mix_seed(self.seed, segment)
        data = self.dataset if remaining is None else self.dataset.subset(remaining)
        if len(data) == 0:
            return _SegmentPlan(None, None, self._loss_tokens, params)
        try:
            core_plan = _core.plan(
                data, algo=params.algo, dp=params.world_size, micro_batches=params.micro_batches,
                samples_per_step=params.global_batch_size, window=params.window, vision_cap=params.vision_cap,
                token_cap=params.token_cap, passes=params.passes, search=params.search, oversize=params.oversize,
                drop_last=params.drop_last, seed=seed, epoch=self._epoch, cost=params.cost)
        except _core.InputError as e:
            # Resumed with fewer samples left than one step of the new ranks or batch size: with drop_last they are
            # the epoch's short last step, dropped. Only a whole epoch with no step is the user's to fix.
            if remaining is None or not params.drop_last or "leaves no step" not in str(e):
                raise
            empty = _SegmentPlan(None, None, self._loss_tokens, params)
            empty.dropped = len(data)
            return empty
        return _SegmentPlan(core_plan, remaining, self._loss_tokens, params)

    def _replay(self) -> _SegmentPlan:
        """Plans the current segment: the finished segments' plans are rebuilt to learn what they consumed."""
        remaining: Optional[np.ndarray] = None
        for segment, (params, steps, digest) in enumerate(self._history):
            if steps == 0:  # consumed nothing; its seed index stays taken so later segments keep theirs
                continue
            plan = self._plan_segment(params, remaining, segment)
            if steps > plan.steps:
                raise ValueError(f"the sampler state's segment {segment} ran {steps} steps of {plan.steps}")
            done = plan.ids_before_step(steps)
            if _digest(done) != digest:
                raise ValueError("the sampler state's epoch was planned differently (another cost file or Fulcrum "
                                 "version?): resuming would lose or repeat samples")
            if steps == plan.steps:  # the whole segment ran: what it left out (drop_last) is out for the epoch
                remaining = np.zeros(0, np.uint32)
                continue
            base = np.arange(len(self.dataset), dtype=np.uint32) if remaining is None else remaining
            remaining = base[~np.isin(base, done)]
        return self._plan_segment(self._params, remaining, len(self._history))

    # -- checkpointing ------------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A digest of the lengths, to refuse a checkpoint taken over other data."""
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=16)
            h.update(np.ascontiguousarray(self.dataset.tokens).tobytes())
            h.update(np.ascontiguousarray(self.dataset.vision).tobytes())
            h.update(np.ascontiguousarray(self._loss_tokens, dtype=np.int64).tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def state_dict(self, steps_done: Optional[int] = None) -> dict:
        """The epoch's progress. ``steps_done`` (optimizer steps finished in this epoch) overrides the count
        of steps handed out, for DataLoaders whose workers fetch ahead of training. A pass left before the epoch's
        end counts the steps it handed out (a training loop broken out of resumes after them); iterating again
        starts the epoch over, as DistributedSampler does, so a checkpoint taken after a pass that only peeked and
        before the one that trains must pass ``steps_done``, or the peeked steps are not trained."""
        step = self._step
        if steps_done is not None:
            # Between where the latest pass started and what it handed out: a count of this run's steps, or steps
            # never handed out, would skip or repeat samples without a word.
            offset = self._steps_before_segment()
            local = int(steps_done) - offset
            if not self._pass_start <= local <= self._step:
                raise ValueError(f"steps_done {steps_done} is outside the steps this pass of epoch {self._epoch} "
                                 f"handed out, {offset + self._pass_start} to {offset + self._step}: pass the "
                                 "epoch's steps finished, the last trained step's info.step + 1")
            step = local
        segments = [dict(asdict(p), steps=s, digest=d) for p, s, d in self._history]
        if step > 0 or not segments:  # a segment that consumed nothing is left out: resuming needs no trace of it
            digest = _digest(self.plan.ids_before_step(step))
            segments.append(dict(asdict(self._params), steps=step, digest=digest))
        return {"version": STATE_VERSION, "epoch": self._epoch, "seed": self.seed,
                "samples": len(self.dataset), "fingerprint": self.fingerprint(), "segments": segments}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes the epoch in ``state``. With the same parameters the batches continue exactly as they would
        have; with another world size or batch size the samples not yet seen are re-planned."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported sampler state version {state.get('version')!r}")
        if state["samples"] != len(self.dataset) or state["fingerprint"] != self.fingerprint():
            raise ValueError("the sampler state was saved over different lengths data (or other loss_tokens)")
        if state["seed"] != self.seed:
            raise ValueError(f"the sampler state was saved with seed {state['seed']}, this sampler has {self.seed}")
        history = []
        for segment in state["segments"]:
            fields = dict(segment)
            steps, digest = int(fields.pop("steps")), str(fields.pop("digest"))
            if steps < 0:
                raise ValueError(f"the sampler state has a segment of {steps} steps")
            history.append((_PlanParams(**fields), steps, digest))
        self._epoch = int(state["epoch"])
        self._restart_epoch()
        last_params, last_steps, last_digest = history[-1]
        if last_params == self._params:
            self._history, self._step, self._expect_digest = history[:-1], last_steps, last_digest
        else:
            self._history, self._step, self._expect_digest = history, 0, None
        self._start_step = self._pass_start = self._step


def _digest(ids: np.ndarray) -> str:
    """Identifies the ids a segment consumed, in order: a replay must reproduce them exactly."""
    return hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.uint32).tobytes(), digest_size=16).hexdigest()


def _load_lengths(lengths, tokens, tiles, vision_tokens, image_flags, root, strict) -> _core.Dataset:
    if isinstance(lengths, _core.Dataset):
        return lengths
    if lengths is not None:
        if tokens is not None:
            raise ValueError("give lengths as a file or as arrays, not both")
        return _core.Dataset.load(os.fspath(lengths), root=os.fspath(root), strict=strict)
    if tokens is None:
        raise ValueError("BalancedBatchSampler needs lengths: a file, a fulcrum.Dataset, or tokens= arrays")
    if tiles is not None and vision_tokens is not None:
        raise ValueError("give tiles= or vision_tokens=, not both")
    unit = "patch_tokens" if vision_tokens is not None else "tiles"
    vision = vision_tokens if vision_tokens is not None else tiles

    def as_array(a):  # an empty list is no float array: numpy's default dtype for it is float64
        if a is None:
            return None
        array = np.asarray(a)
        return array.astype(np.int64) if array.size == 0 else array

    return _core.Dataset.from_arrays(as_array(tokens), as_array(vision), as_array(image_flags), unit)
