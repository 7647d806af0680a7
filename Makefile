# Thin wrapper over meson: `make run` and `make check` set everything up first.
#   make run     installs the run set (scripts/install-deps run), builds the two programs it runs
#                (CPU only unless CUDA=1) and trains the default preset
#   make check   installs the check set, builds everything (the CUDA path wherever nvcc is) and
#                runs every test suite that can run here
# Both compile with JOBS parallel jobs (the number of cores; nvcc takes much memory per job).
BUILD ?= build
ASAN_BUILD ?= build-asan
MESON_OPTS ?=
JOBS ?= $(shell getconf _NPROCESSORS_ONLN)
# Tests run TEST_JOBS at a time (meson's is_parallel: false keeps the timing-bound ones alone;
# tests/meson.build): each test's OpenMP has one thread, so one at a time left a core idle.
TEST_JOBS ?= $(JOBS)
# CUDA=1: make run builds the CUDA path too (make check builds it whenever nvcc is found)
CUDA ?= 0

.PHONY: all deps deps-check setup setup-check build run check check-style clean

all: build

deps:
	@scripts/install-deps run

deps-check:
	@scripts/install-deps check

# The build folder, configured once. make run leaves the CUDA path out of a new one unless CUDA=1
# (half of a first build is nvcc's); make check turns it back to auto, which builds it where nvcc is.
cuda_is = grep -q '"name": "cuda", "value": "$(1)"' $(BUILD)/meson-info/intro-buildoptions.json
setup: deps
	@test -f $(BUILD)/build.ninja || meson setup $(BUILD) -Dcuda=$(if $(filter 1,$(CUDA)),enabled,disabled) $(MESON_OPTS)
	@if [ "$(CUDA)" = 1 ] && ! $(call cuda_is,enabled); then meson configure $(BUILD) -Dcuda=enabled; fi

# A folder that make run configured before the check set was installed is configured again, so
# that meson finds what the check set brought (GTK for the window and its tests).
setup-check: deps-check
	@if [ ! -f $(BUILD)/build.ninja ]; then meson setup $(BUILD) $(MESON_OPTS); \
	elif $(call cuda_is,disabled); then meson setup --reconfigure $(BUILD) -Dcuda=auto; \
	else meson setup --reconfigure $(BUILD); fi

build: setup
	meson compile -C $(BUILD) -j $(JOBS)

# Trains the default preset (tiny-gpt; PRESET=tiny-dit, tiny-latent-dit, tiny-t2i or tiny-resnet for
# the image models; tiny-latent-dit first has the build train its VAE, data/vae/README.md) data-parallel,
# 2 ranks × 1 thread through the launcher (as torchrun would), with live progress; the model
# lands in runs/<preset>. Each `make run` is a new run: --overwrite moves an earlier one to
# runs/<preset>/previous/. Only what the preset needs is built.
PRESET ?= tiny-gpt
NPROC ?= 2
run: setup
	meson compile -C $(BUILD) -j $(JOBS) engine/cli/cohort-train engine/cli/cohort-run \
	  $$(case "$(PRESET)" in tiny-gpt) ;; tiny-latent-dit) echo data/colour-glyphs tiny-vae ;; tiny-t2i) echo data/t2i-glyphs ;; *) echo data/glyphs ;; esac)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(( $$(getconf _NPROCESSORS_ONLN) / $(NPROC) ))} $(BUILD)/engine/cli/cohort-run --standalone \
	  --nproc-per-node $(NPROC) $(BUILD)/engine/cli/cohort-train --preset $(PRESET) --overwrite

check: setup-check
	meson compile -C $(BUILD) -j $(JOBS)
	meson test -C $(BUILD) --print-errorlogs --num-processes $(TEST_JOBS)
	scripts/check-style
	scripts/check-sizes
	@test -f $(ASAN_BUILD)/build.ninja || meson setup $(ASAN_BUILD) -Dbuildtype=debugoptimized \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dgui=disabled -Dcuda=disabled
	meson compile -C $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  meson test -C $(ASAN_BUILD) --suite unit --suite dist --suite fuzz --no-suite heavy \
	  --print-errorlogs \
	  --num-processes $(TEST_JOBS) \
	  --timeout-multiplier 4

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
