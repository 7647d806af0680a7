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

/* The values of `log`'s `level`. */
#define COHORT_LEVEL_DEBUG   "debug"
#define COHORT_LEVEL_INFO    "info"
#define COHORT_LEVEL_WARNING "warning"
#define COHORT_LEVEL_ERROR   "error"

/* The control channel's requests, one word a line (engine/progress/control.h). */
#define COHORT_CONTROL_WORD_SAMPLE "sample"
#define COHORT_CONTROL_WORD_SAVE   "save"
