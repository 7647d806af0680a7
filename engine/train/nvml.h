/* GPU memory and utilisation from NVML, loaded at run time (dlopen "libnvidia-ml.so.1"), so
 * the engine neither links nor needs it: without NVML (or without a GPU) queries just fail. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* For CUDA device `cuda_device` (as CUDA_VISIBLE_DEVICES numbers it; matched to NVML by PCI
 * bus id): memory in use on that GPU (bytes, all processes, as nvidia-smi shows it) and the
 * GPU utilisation over NVML's last sample period (percent). FALSE when NVML is absent or the
 * query fails; never fatal. Thread-safe. */
gboolean cohort_nvml_query(int cuda_device, guint64 *mem_used, guint *util_percent);

G_END_DECLS
