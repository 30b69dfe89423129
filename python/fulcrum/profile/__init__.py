"""Measured costs for the simulator and the planner: a torch model's layers timed pass by pass into Fulcrum's
profile table (``fulcrum simulate --profile``), the same read back from a torch.profiler trace, and collectives
timed over a process group or read from nccl-tests output into a cluster file, and the host's time per operator
(the cluster file's kernel_launch_seconds)."""

from fulcrum.profile.comm import (CollectiveFit, CpuCalibration, benchmark_all_reduce, calibrate_cpu,
                                  collective_start_seconds, cpu_cluster, fit_alpha_beta,
                                  measure_collective_compute_seconds, measure_compute_slowdown, parse_nccl_tests,
                                  slowest_rank_seconds, time_optimizer_step)
from fulcrum.profile.drift import (SpeedCheck, alternating_blocks, calibration_across_runs, measurement_order,
                                   recalibrate_folder, run_alternating, scaled_profile, size_correction,
                                   together_record, with_optimizer_seconds, write_check)
from fulcrum.profile.kineto import import_kineto_trace
from fulcrum.profile.launch import LaunchMeasurement, measure_launch_seconds
from fulcrum.profile.layers import (PASSES, flattened_layers, layer_shape, profile_model, read_profile, time_layer,
                                    write_profile)

__all__ = ["CollectiveFit", "CpuCalibration", "LaunchMeasurement", "PASSES", "SpeedCheck", "alternating_blocks",
           "benchmark_all_reduce", "calibrate_cpu", "calibration_across_runs", "collective_start_seconds",
           "cpu_cluster", "fit_alpha_beta", "flattened_layers", "import_kineto_trace", "layer_shape",
           "measure_collective_compute_seconds", "measure_compute_slowdown", "measure_launch_seconds",
           "measurement_order", "parse_nccl_tests", "profile_model", "read_profile", "recalibrate_folder",
           "run_alternating", "scaled_profile", "size_correction", "slowest_rank_seconds", "time_layer",
           "time_optimizer_step", "together_record", "with_optimizer_seconds", "write_check", "write_profile"]
