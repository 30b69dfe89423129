"""Running Fulcrum's plans on PyTorch: pipeline stages from the plan's layer ranges, recomputation per layer,
data parallelism through DDP, GPipe and 1F1B through ``torch.distributed.pipelining``, other orders through
Fulcrum's own executor; multi-task waves (``fulcrum multitask``) through WaveRuntime; a measured timeline per
rank in the simulator's Chrome trace format."""

from fulcrum.runtime.executor import ScheduleExecutor
from fulcrum.runtime.plan import RuntimePlan
from fulcrum.runtime.runtime import Runtime, StepResult
from fulcrum.runtime.stage import StageModule
from fulcrum.runtime.teardown import end_rank
from fulcrum.runtime.timeline import Event, Timeline, chrome_trace, write_chrome_trace
from fulcrum.runtime.waves import WavePlan, WaveRuntime, WaveStepResult

__all__ = ["Event", "Runtime", "RuntimePlan", "ScheduleExecutor", "StageModule", "StepResult", "Timeline",
           "WavePlan", "WaveRuntime", "WaveStepResult", "chrome_trace", "end_rank", "write_chrome_trace"]
