# Thin wrapper over meson: `make run` and `make check` set everything up first.
BUILD ?= build
ASAN_BUILD ?= build-asan
MESON_OPTS ?=

.PHONY: all deps setup build run check check-style clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

setup: deps $(BUILD)/build.ninja

build: setup
	meson compile -C $(BUILD)

# Trains the default preset (tiny-gpt; PRESET=tiny-dit, tiny-latent-dit or tiny-resnet for the
# image models; tiny-latent-dit first has the build train its VAE, data/vae/README.md) data-parallel,
# 2 ranks × 1 thread through the launcher (as torchrun would), with live progress; the model
# lands in runs/<preset>. Each `make run` is a new run: --overwrite moves an earlier one to
# runs/<preset>/previous/.
PRESET ?= tiny-gpt
NPROC ?= 2
run: build
	@if [ "$(PRESET)" = tiny-latent-dit ]; then meson compile -C $(BUILD) tiny-vae; fi
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(( $$(getconf _NPROCESSORS_ONLN) / $(NPROC) ))} $(BUILD)/engine/cli/cohort-run --standalone \
	  --nproc-per-node $(NPROC) $(BUILD)/engine/cli/cohort-train --preset $(PRESET) --overwrite

check: build
	meson test -C $(BUILD) --print-errorlogs --num-processes 1
	scripts/check-style
	scripts/check-sizes
	@test -f $(ASAN_BUILD)/build.ninja || meson setup $(ASAN_BUILD) -Dbuildtype=debugoptimized \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dgui=disabled -Dcuda=disabled
	meson compile -C $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  meson test -C $(ASAN_BUILD) --suite unit --suite dist --suite fuzz --print-errorlogs \
	  --num-processes 1 \
	  --timeout-multiplier 4

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
