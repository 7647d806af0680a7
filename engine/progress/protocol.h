/* The progress protocol's words (docs/progress-protocol.md): event names, member names, the
 * values of `status` and `level`, and the control channel's requests. The engine writes events
 * with these names and the window reads them with the same ones, so neither side spells one
 * by hand. Every name here is documented on that page (tests/test-protocol.c checks it).
 *
 * Adding a member: a constant here, the writer, a sentence on the page; readers ignore members
 * they do not know, so an older window keeps working. */
#pragma once

/* Event names: the value of the `event` member. */
#define COHORT_EVENT_START      "start"
#define COHORT_EVENT_STEP       "step"
#define COHORT_EVENT_EVAL       "eval"
#define COHORT_EVENT_SAMPLE     "sample"
#define COHORT_EVENT_CHECKPOINT "checkpoint"
#define COHORT_EVENT_RANKS      "ranks"
#define COHORT_EVENT_LOG        "log"
#define COHORT_EVENT_ERROR      "error"
#define COHORT_EVENT_DONE       "done"
#define COHORT_EVENT_TOKENIZE   "tokenize"
#define COHORT_EVENT_HANG       "hang"
#define COHORT_EVENT_HEALTH     "health"
#define COHORT_EVENT_PROBE      "probe"
#define COHORT_EVENT_LATENTS    "latents"

/* Members every event has, and the one the run record adds. */
#define COHORT_FIELD_EVENT  "event"
#define COHORT_FIELD_TIME   "time"
#define COHORT_FIELD_RUN_ID "run_id"

/* `start`. */
#define COHORT_FIELD_RUN         "run"
#define COHORT_FIELD_WORKSPACE   "workspace"
#define COHORT_FIELD_MODEL       "model"
#define COHORT_FIELD_PARAMS      "params"
#define COHORT_FIELD_DEVICE      "device"
#define COHORT_FIELD_CUDA_DEVICE "cuda_device"
/* `start`'s `cuda` object (builds with the CUDA path). */
#define COHORT_FIELD_CUDA                        "cuda"
#define COHORT_FIELD_CUDA_RUNTIME                "runtime"
#define COHORT_FIELD_CUDA_DRIVER_CUDA            "driver_cuda"
#define COHORT_FIELD_CUDA_DRIVER                 "driver"
#define COHORT_FIELD_CUDA_NCCL                   "nccl"
#define COHORT_FIELD_THREADS                     "threads"
#define COHORT_FIELD_NUM_WORKERS                 "num_workers"
#define COHORT_FIELD_PIN_MEMORY                  "pin_memory"
#define COHORT_FIELD_PRECISION                   "precision"
#define COHORT_FIELD_GEMM                        "gemm"
#define COHORT_FIELD_WORLD_SIZE                  "world_size"
#define COHORT_FIELD_BATCH_SIZE                  "batch_size"
#define COHORT_FIELD_GRADIENT_ACCUMULATION_STEPS "gradient_accumulation_steps"
#define COHORT_FIELD_GLOBAL_BATCH                "global_batch"
#define COHORT_FIELD_TOKENS_PER_STEP             "tokens_per_step"
#define COHORT_FIELD_LEARNING_RATE               "learning_rate"
#define COHORT_FIELD_SCALED_LEARNING_RATE        "scaled_learning_rate"
#define COHORT_FIELD_LR_SCALING                  "lr_scaling"
#define COHORT_FIELD_START_STEP                  "start_step"
#define COHORT_FIELD_RESUMED_FROM                "resumed_from"
#define COHORT_FIELD_METRICS                     "metrics"
#define COHORT_FIELD_CONFIG                      "config"
/* `start` and `ranks`: each rank's examples per micro-batch, in rank order. */
#define COHORT_FIELD_RANK_BATCH_SIZES "rank_batch_sizes"
/* `start`'s `teacher` object (a distillation run). */
#define COHORT_FIELD_TEACHER "teacher"
#define COHORT_FIELD_WEIGHTS "weights"
#define COHORT_FIELD_SHA256  "sha256"
#define COHORT_FIELD_BYTES   "bytes"

/* `step` (and, where they apply, `start` and `done`). */
#define COHORT_FIELD_STEP            "step"
#define COHORT_FIELD_TOTAL_STEPS     "total_steps"
#define COHORT_FIELD_EPOCH           "epoch"
#define COHORT_FIELD_EPOCH_STEP      "epoch_step"
#define COHORT_FIELD_STEPS_PER_EPOCH "steps_per_epoch"
#define COHORT_FIELD_LOSS            "loss"
#define COHORT_FIELD_LOSS_DISTILL    "loss_distill"
#define COHORT_FIELD_LOSS_TASK       "loss_task"
#define COHORT_FIELD_LR              "lr"
#define COHORT_FIELD_GRAD_NORM       "grad_norm"
#define COHORT_FIELD_SAMPLES_PER_S   "samples_per_s"
#define COHORT_FIELD_TOKENS_PER_S    "tokens_per_s"
#define COHORT_FIELD_ELAPSED_S       "elapsed_s"
#define COHORT_FIELD_ETA_S           "eta_s"
#define COHORT_FIELD_LOSS_SCALE      "loss_scale"
#define COHORT_FIELD_SKIPPED         "skipped"
#define COHORT_FIELD_SKIPPED_STEPS   "skipped_steps"
/* The losses a model reports beside `loss` start with this (`loss_distill`, `loss_task`);
 * `loss_scale` is no loss. */
#define COHORT_FIELD_LOSS_PART_PREFIX "loss_"

/* `eval`: the model's metrics (the `start` event's `metrics` lists them), then the counts. */
#define COHORT_FIELD_VAL_LOSS    "val_loss"
#define COHORT_FIELD_ACCURACY    "accuracy"
#define COHORT_FIELD_VAL_SAMPLES "val_samples"
#define COHORT_FIELD_VAL_TOKENS  "val_tokens"
#define COHORT_FIELD_EMA         "ema"

/* `sample` and `checkpoint`. */
#define COHORT_FIELD_REQUESTED "requested"
#define COHORT_FIELD_PROMPT    "prompt"
#define COHORT_FIELD_TEXT      "text"
#define COHORT_FIELD_TOKENS    "tokens"
#define COHORT_FIELD_IMAGE     "image"
#define COHORT_FIELD_ROWS      "rows"
#define COHORT_FIELD_STEPS     "steps"
#define COHORT_FIELD_CFG_SCALE "cfg_scale"
#define COHORT_FIELD_PATH      "path"

/* `tokenize` (also `path`, `ranks`, `tokens`, `eta_s`). */
#define COHORT_FIELD_DATA         "data"
#define COHORT_FIELD_DONE_BYTES   "done_bytes"
#define COHORT_FIELD_TOTAL_BYTES  "total_bytes"
#define COHORT_FIELD_SOURCE_BYTES "source_bytes"
#define COHORT_FIELD_DOCUMENTS    "documents"
#define COHORT_FIELD_MB_PER_S     "mb_per_s"

/* `latents` (also `eta_s`, `elapsed_s`): caching a set's latents through vae_from. */
#define COHORT_FIELD_SET          "set"
#define COHORT_FIELD_DONE         "done"
#define COHORT_FIELD_TOTAL        "total"
#define COHORT_FIELD_ENCODED      "encoded"
#define COHORT_FIELD_IMAGES_PER_S "images_per_s"
#define COHORT_FIELD_FINISHED     "finished"

/* `ranks`: the list, each rank's entry, and the slowest rank. */
#define COHORT_FIELD_RANKS            "ranks"
#define COHORT_FIELD_RANK             "rank"
#define COHORT_FIELD_HOST             "host"
#define COHORT_FIELD_STEP_S           "step_s"
#define COHORT_FIELD_DATA_S           "data_s"
#define COHORT_FIELD_COMM_S           "comm_s"
#define COHORT_FIELD_ALLREDUCE_S      "allreduce_s"
#define COHORT_FIELD_ALLREDUCE_HIDDEN "allreduce_hidden"
#define COHORT_FIELD_SYNCBN_S         "syncbn_s"
#define COHORT_FIELD_MEM_BYTES        "mem_bytes"
#define COHORT_FIELD_MEM_PEAK_BYTES   "mem_peak_bytes"
#define COHORT_FIELD_OPTIM_BYTES      "optim_bytes"
#define COHORT_FIELD_BATCH            "batch"
/* `ranks` at ZeRO stages 2 and 3. */
#define COHORT_FIELD_SHARD_BYTES         "shard_bytes"
#define COHORT_FIELD_GATHERED_PEAK_BYTES "gathered_peak_bytes"
#define COHORT_FIELD_GATHER_WAIT_S       "gather_wait_s"
#define COHORT_FIELD_ZERO_ORDER          "zero_order"
#define COHORT_FIELD_TEACHER_BYTES       "teacher_bytes"
#define COHORT_FIELD_GPU_MEM_USED        "gpu_mem_used"
#define COHORT_FIELD_GPU_MEM_PEAK        "gpu_mem_peak"
#define COHORT_FIELD_GPU_UTIL            "gpu_util"
#define COHORT_FIELD_SLOWEST             "slowest"
#define COHORT_FIELD_TRAINABLE           "trainable"
#define COHORT_FIELD_ALLREDUCE_BYTES     "allreduce_bytes"

/* `hang`: the collective waited in, the ranks that have not reached it and each rank's
 * state (`rank`, `step` and `ranks` as above). */
#define COHORT_FIELD_COLLECTIVE      "collective"
#define COHORT_FIELD_SEQ             "seq"
#define COHORT_FIELD_LABEL           "label"
#define COHORT_FIELD_WAITED_S        "waited_s"
#define COHORT_FIELD_TIMEOUT_S       "timeout_s"
#define COHORT_FIELD_RESOLVED        "resolved"
#define COHORT_FIELD_MISSING         "missing"
#define COHORT_FIELD_ARRIVED         "arrived"
#define COHORT_FIELD_PHASE           "phase"
#define COHORT_FIELD_PHASE_S         "phase_s"
#define COHORT_FIELD_TICKS           "ticks"
#define COHORT_FIELD_WAITING_S       "waiting_s"
#define COHORT_FIELD_LAST_COLLECTIVE "last_collective"
#define COHORT_FIELD_LAST_SEQ        "last_seq"
#define COHORT_FIELD_LAST_LABEL      "last_label"
#define COHORT_FIELD_RECORD_AGE_S    "record_age_s"
#define COHORT_FIELD_SILENT          "silent"

/* The values of a rank's `phase` (engine/base/phase.h names them the same). */
#define COHORT_PHASE_STARTUP    "startup"
#define COHORT_PHASE_DATA       "data"
#define COHORT_PHASE_TOKENIZING "tokenizing"
#define COHORT_PHASE_CACHING    "caching"
#define COHORT_PHASE_FORWARD    "forward"
#define COHORT_PHASE_BACKWARD   "backward"
#define COHORT_PHASE_OPTIMIZER  "optimizer"
#define COHORT_PHASE_EVALUATION "evaluation"
#define COHORT_PHASE_SAMPLE     "sample"
#define COHORT_PHASE_CHECKPOINT "checkpoint"
#define COHORT_PHASE_EXPORT     "export"
#define COHORT_PHASE_HEALTH     "health"
#define COHORT_PHASE_PROBE      "probe"
#define COHORT_PHASE_DONE       "done"

/* `health`: the ranks' weights compared (`step`, `requested` and `status` as above). */
#define COHORT_FIELD_TENSORS   "tensors"
#define COHORT_FIELD_BUFFERS   "buffers"
#define COHORT_FIELD_CHECK_S   "check_s"
#define COHORT_FIELD_CHECKSUM  "checksum"
#define COHORT_FIELD_REFERENCE "reference"
#define COHORT_FIELD_DIVERGING "diverging"
#define COHORT_FIELD_TENSOR    "tensor"

/* `probe` (cohort-train --probe): what the group is, what was measured, the forecast. */
#define COHORT_FIELD_NUM_NODES          "num_nodes"
#define COHORT_FIELD_BACKEND            "backend"
#define COHORT_FIELD_REDUCE_PRECISION   "reduce_precision"
#define COHORT_FIELD_CONFIG_HASH        "config_hash"
#define COHORT_FIELD_TOKENS_PER_EXAMPLE "tokens_per_example"
#define COHORT_FIELD_PROBE_S            "probe_s"
#define COHORT_FIELD_MATCHES_CONFIG     "matches_config"
#define COHORT_FIELD_MEASURED           "measured"
#define COHORT_FIELD_FORWARD_S          "forward_s"
#define COHORT_FIELD_BACKWARD_S         "backward_s"
#define COHORT_FIELD_HALF_BATCH         "half_batch"
#define COHORT_FIELD_FORWARD_HALF_S     "forward_half_s"
#define COHORT_FIELD_BACKWARD_HALF_S    "backward_half_s"
#define COHORT_FIELD_OPTIMIZER_S        "optimizer_s"
#define COHORT_FIELD_SYNCED_PASS_S      "synced_pass_s"
#define COHORT_FIELD_CONTENTION         "contention"
#define COHORT_FIELD_STRETCH_S          "stretch_s"
#define COHORT_FIELD_BUCKETS            "buckets"
#define COHORT_FIELD_READY              "ready"
#define COHORT_FIELD_SMALL_COLLECTIVES  "small_collectives"
#define COHORT_FIELD_SYNCBN_GATHERS     "syncbn_gathers"
#define COHORT_FIELD_SYNCBN_REDUCES     "syncbn_reduces"
#define COHORT_FIELD_SYNCBN_BYTES       "syncbn_bytes"
#define COHORT_FIELD_BUFFER_BYTES       "buffer_bytes"
#define COHORT_FIELD_ZERO_GATHER_BYTES  "zero_gather_bytes"
#define COHORT_FIELD_COLLECTIVES        "collectives"
#define COHORT_FIELD_ALPHA_S            "alpha_s"
#define COHORT_FIELD_BETA_S             "beta_s"
#define COHORT_FIELD_GBIT_S             "gbit_s"
#define COHORT_FIELD_POINTS             "points"
#define COHORT_FIELD_FORECAST           "forecast"
#define COHORT_FIELD_EFFICIENCY         "efficiency"
#define COHORT_FIELD_COMPUTE_S          "compute_s"
#define COHORT_FIELD_BUCKET_COMM_S      "bucket_comm_s"
#define COHORT_FIELD_EXPOSED_S          "exposed_s"
#define COHORT_FIELD_HIDDEN             "hidden"
#define COHORT_FIELD_OTHER_COMM_S       "other_comm_s"
#define COHORT_FIELD_MIN_BATCH_90       "min_batch_90"
#define COHORT_FIELD_MIN_BATCH_LIMIT    "min_batch_limit"
/* `probe`: each rank's own compute, and the even and the balanced split of a global
 * micro-batch. */
#define COHORT_FIELD_PER_RANK "per_rank"
#define COHORT_FIELD_SPLIT    "split"
#define COHORT_FIELD_EVEN     "even"
#define COHORT_FIELD_AUTO     "auto"
#define COHORT_FIELD_EVEN_S   "even_s"
#define COHORT_FIELD_AUTO_S   "auto_s"

/* `log` and `error`. */
#define COHORT_FIELD_LEVEL   "level"
#define COHORT_FIELD_MESSAGE "message"

/* `done`. */
#define COHORT_FIELD_STATUS     "status"
#define COHORT_FIELD_FINAL_LOSS "final_loss"
#define COHORT_FIELD_MODEL_PATH "model_path"

/* The values of `done`'s `status`. */
#define COHORT_STATUS_COMPLETED "completed"
#define COHORT_STATUS_STOPPED   "stopped"
#define COHORT_STATUS_FAILED    "failed"
/* The values of `health`'s `status`. */
#define COHORT_STATUS_OK       "ok"
#define COHORT_STATUS_DIVERGED "diverged"

/* The values of `log`'s `level`. */
#define COHORT_LEVEL_DEBUG   "debug"
#define COHORT_LEVEL_INFO    "info"
#define COHORT_LEVEL_WARNING "warning"
#define COHORT_LEVEL_ERROR   "error"

/* The control channel's requests, one word a line (engine/progress/control.h). */
#define COHORT_CONTROL_WORD_SAMPLE "sample"
#define COHORT_CONTROL_WORD_SAVE   "save"
#define COHORT_CONTROL_WORD_CHECK  "check"
