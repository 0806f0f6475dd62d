"""The names a run's record uses in MLflow: its metrics, its tags, and a cell's "setting@fraction".

Code reads `names.EPOCH_TIME_S`, never the string: a typo fails at import, and a rename is made here once.
docs/what-each-run-records.md defines each name. Pure: no torch, no MLflow (the report imports it).
"""

from __future__ import annotations

from typing import NamedTuple

# An epoch's figures (wif.measure.epochs computes them)
EPOCH_TIME_S = "epoch_time_s"
THROUGHPUT_IMG_S = "throughput_img_s"
DATA_WAIT_S = "data_wait_s"
COPY_S = "copy_s"
GPU_BLOCKED_S = "gpu_blocked_s"
COMPUTE_S = "compute_s"
GPU_IDLE_S = "gpu_idle_s"
FIRST_BATCH_S = "first_batch_s"
CPU_UTIL_PCT = "cpu_util_pct"
GPU_UTIL_PCT = "gpu_util_pct"
TREE_CPU_S = "tree_cpu_s"
COMPUTE_THREADS = "compute_threads"
COPY_BYTES_PER_EPOCH = "copy_bytes_per_epoch"
HOST_OTHER_CPU_PCT = "host_other_cpu_pct"
HOST_IDLE_CORES = "host_idle_cores"  # the machine's cores less the run's own use, over the same span
STORAGE_READ_BYTES = "storage_read_bytes"
MINOR_FAULTS = "minor_faults"
PAGE_CACHE_RESIDENT_FRAC = "page_cache_resident_frac"
PAGE_CACHE_COLD = "page_cache_cold"
DECODE_SLOW_PATH_IMAGES = "decode_slow_path_images"
TRAIN_LOSS = "train_loss"
VAL_LOSS = "val_loss"
VAL_ACC = "val_acc"
VAL_TIME_S = "val_time_s"

# A run's steady summary and its costs
EPOCH_TIME_MEDIAN_S = "epoch_time_median_s"
EPOCH_TIME_MEAN_S = "epoch_time_mean_s"
THROUGHPUT_MEAN_IMG_S = "throughput_mean_img_s"
DATA_WAIT_SHARE_MEAN = "data_wait_share_mean"
FIRST_BATCH_MEAN_S = "first_batch_mean_s"
DATA_WAIT_MEAN_S = "data_wait_mean_s"
COMPUTE_MEAN_S = "compute_mean_s"
GPU_IDLE_MEAN_S = "gpu_idle_mean_s"
GPU_BLOCKED_MEAN_S = "gpu_blocked_mean_s"
GPU_UTIL_MEAN_PCT = "gpu_util_mean_pct"
WARMUP_EPOCH_TIME_S = "warmup_epoch_time_s"
EPOCHS_RUN = "epochs_run"
TIME_TOTAL_S = "time_total_s"
SETUP_S = "setup_s"
DATA_LOAD_S = "data_load_s"
COMPILE_S = "compile_s"
JOB_OVERHEAD_S = "job_overhead_s"
TEST_ACC = "test_acc"
TEST_TIME_S = "test_time_s"  # the test pass, after the last epoch
VAL_TIME_TOTAL_S = "val_time_total_s"  # every epoch's validation pass, summed: beside the epochs, in none of them
SAMPLER_CPU_PCT = "sampler_cpu_pct"
# Windows under wif.watch (NOTE [ Windows ] in wif.watcher.windows): a window's place, and what the script offered
SCRIPT_EPOCH = "script_epoch"  # the script's epoch a window is in, from 0
WINDOWED = "windowed"  # 1: the window is a part of its epoch; 0: the whole epoch
SCRIPT_EPOCHS = "script_epochs"  # the script's epochs that ended under the watch
SCRIPT_BATCHES = "script_batches"  # the batches they held, before any cut (what windows can be cut from)
# Under wif-advise's orders a window's epoch_time_s is the script's own (NOTE [ A window times the script's own run ])
WINDOW_TIME_S = "window_time_s"  # the window's clock as it ran, before its epoch's start was spread
EPOCH_START_S = "epoch_start_s"  # its epoch's start: the first batch's wait beyond a steady batch's
SCRIPT_STREAM = "script_stream"  # 1: the script's loader had no length (a stream): no epoch to spread a start over
BETWEEN_EPOCHS_S = "between_epochs_s"  # median: the script's own time from one epoch's end to the next one's start

# Memory
RAM_PEAK_RSS_MB = "ram_peak_rss_mb"
RAM_PEAK_PSS_MB = "ram_peak_pss_mb"
RAM_PEAK_USS_MB = "ram_peak_uss_mb"
SHM_PEAK_MB = "shm_peak_mb"
VRAM_PEAK_ALLOCATED_MB = "vram_peak_allocated_mb"
VRAM_PEAK_RESERVED_MB = "vram_peak_reserved_mb"
VRAM_PEAK_DEVICE_MB = "vram_peak_device_mb"

# The advice's parent run
INTERFERENCE_S = "interference_s"
LIMIT_SHARE = "limit_share"

# Tags (a run's strings; the report groups and filters by them)
TAG_KIND = "wif.kind"
TAG_DEVICE = "wif.device"
TAG_CELL = "wif.cell"
TAG_MODEL = "wif.model"
TAG_GPU = "wif.gpu"
TAG_GPU_UUID = "wif.gpu_uuid"
TAG_ERROR = "wif.error"
TAG_CONTENDED = "wif.contended"
TAG_RACE_ID = "wif.race_id"
TAG_HOST = "wif.host"
TAG_LOADER = "wif.loader"
TAG_FRACTION = "wif.fraction"
TAG_SWEEP_ID = "wif.sweep_id"
TAG_SWEEP_POS = "wif.sweep_pos"
TAG_PID = "wif.pid"
TAG_PID_STARTED = "wif.pid_started"
TAG_BLOCK = "wif.block"
TAG_REPEAT = "wif.repeat"
TAG_STEP = "wif.step"
TAG_ENGINE = "wif.engine"
TAG_TRANSFER = "wif.transfer"
TAG_PAGE_CACHE_COLD = "wif.page_cache_cold"
TAG_TORCH_THREADS = "wif.torch_threads"
TAG_GPU_DRIVER = "wif.gpu_driver"
TAG_VRAM_SOURCE = "wif.vram_source"
TAG_CONFIG_HASH = "wif.config_hash"
TAG_STOP_REASON = "wif.stop_reason"
TAG_ADVISE_ID = "wif.advise_id"
TAG_ADVISE_ROLE = "wif.advise_role"
TAG_SCRIPT = "wif.script"
TAG_N_TRAIN = "wif.n_train"
TAG_CUDA = "wif.cuda"
TAG_GPU_CAPABILITY = "wif.gpu_capability"
TAG_PAGE_CACHE_NOTE = "wif.page_cache_note"
TAG_DECODE_NOTE = "wif.decode_note"


class Cell(NamedTuple):
    """What the report compares across repeats: a setting at a fraction, "setting@fraction"."""

    setting: str
    fraction: str

    @classmethod
    def parse(cls, text: str) -> "Cell":
        """The cell a "setting@fraction" tag names; a text with no "@" is a setting with no fraction."""
        setting, _, fraction = text.rpartition("@")
        return cls(setting, fraction) if setting else cls(text, "")

    @classmethod
    def of(cls, setting: str, fraction: float) -> "Cell":
        """The cell of `setting` at `fraction`, written as the tag writes it (`0.1`, not `0.10`)."""
        return cls(setting, f"{fraction:g}")

    def __str__(self) -> str:
        return f"{self.setting}@{self.fraction}" if self.fraction else self.setting
