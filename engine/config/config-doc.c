/* Renders docs/config.md: fixed prose about files, versions, --set and presets, then one
 * table per page of keys built from cohort_config_keys(). */
#include "engine/config/config-doc.h"
#include "engine/config/config-keys.h"
#include "engine/config/config-private.h"

#include <string.h>

static const char intro[] =
    "# Configuration reference\n"
    "\n"
    "<!-- Generated from the key table in engine/config/config-keys.c; do not edit by hand.\n"
    "     Regenerate with: build/engine/cli/cohort-config-doc docs/config.md -->\n"
    "\n"
    "A training run is described by one TrainConfig: a flat JSON object whose keys are listed "
    "below.\n"
    "`cohort-train --config run.json` reads one from a file, `--preset NAME` reads a preset, "
    "and the\n"
    "window edits the same keys. A key that a file leaves out takes its default.\n"
    "\n"
    "```json\n"
    "{\n"
    "  \"version\": 1,\n"
    "  \"n_layer\": 6,\n"
    "  \"learning_rate\": 0.0006,\n"
    "  \"device_indexes\": [0, 1]\n"
    "}\n"
    "```\n"
    "\n"
    "## Checking\n"
    "\n"
    "Every value is checked when a file is loaded. A wrong JSON type (a string for a number, a "
    "fraction\n"
    "for an integer, `null`), a number out of range or a word that is not one of the choices "
    "stops the\n"
    "load with one line that names the file, the key, the value and what is allowed:\n"
    "\n"
    "```\n"
    "run.json: key \"learning_rate\": -1 is not allowed; allowed: a number > 0 and <= 10\n"
    "run.json: unknown key \"learnig_rate\"; did you mean \"learning_rate\"?\n"
    "```\n"
    "\n"
    "Unknown keys are errors, never silently dropped, and so is a key given twice. The file "
    "must be\n"
    "strict JSON (RFC 8259): one object and nothing after it but whitespace; no comments, "
    "single\n"
    "quotes, trailing commas, leading zeros, hexadecimal numbers, `NaN`, byte order mark or raw "
    "control\n"
    "characters in strings; no `\\u0000` in strings, no integer beyond 64 bits, and at most 64 "
    "levels of\n"
    "nesting. A file that breaks one of these is refused with its line and column:\n"
    "\n"
    "```\n"
    "run.json: not valid JSON: 3:15: a number with a leading zero is not allowed (write 1, not "
    "01)\n"
    "```\n"
    "\n"
    "Some rules involve two keys:\n"
    "\n"
    "- `n_embd` must be a multiple of `n_head`;\n"
    "- `node_rank` must be less than `num_nodes`;\n"
    "- `data_format` must be one the `model` trains on (`gpt`: `text` or `tokens`; `dit` and "
    "`resnet`:\n"
    "  `images`), checked when training starts;\n"
    "- `vocab_size` must be 256 when `data_format` is `text` and `tokenizer` is `bytes` (one "
    "token per\n"
    "  byte), unless `init_from` is a folder that holds a tokenizer; with a tokenizer it must be "
    "the\n"
    "  tokenizer's size (checked when training starts).\n"
    "\n"
    "A `warmup_steps` longer than the run is shortened to the run when training starts (the "
    "log says\n"
    "so), as other trainers do: `--set max_steps=5` on a preset with 20 warm-up steps just "
    "runs.\n"
    "\n"
    "A config can be valid and still need something this build lacks: `device` `cuda` loads "
    "and saves\n"
    "everywhere, but training refuses it in a build without the CUDA path.\n"
    "\n"
    "Distillation (`teacher_from`, `distill_*`, `student_init`; see "
    "[distillation.md](distillation.md)) is checked "
    "when a run\n"
    "starts, not on load: `student_init` `teacher_layers` needs a `teacher_from`, no "
    "`init_from` and a\n"
    "`gpt` or `dit` model, and\n"
    "the teacher folder must hold a model of the student's family with the same vocabulary, or "
    "image\n"
    "size, channels and classes.\n"
    "\n"
    "`precision` `bf16` and `fp16` are mixed precision: the operands of every matrix product "
    "are\n"
    "rounded to that format (tensor cores on a GPU) and summed in fp32; everything else, the "
    "weights,\n"
    "the optimizer moments and checkpoints stay fp32. `fp16` adds dynamic loss scaling: the "
    "loss is\n"
    "multiplied by the scale (from `loss_scale_init`), a step whose gradients overflow is "
    "skipped and\n"
    "halves the scale, and `loss_scale_growth_interval` clean steps double it. On the CPU "
    "both run\n"
    "with the GPU's rounding. `bf16` uses the CPU's bf16 dot-product instructions (AVX-512 "
    "BF16)\n"
    "where it has them: its matrix products run about twice as fast as in `fp32`. Elsewhere, "
    "and\n"
    "`fp16` always, the operands are rounded and multiplied in fp32, for checking numerics, a "
    "little\n"
    "slower than `fp32`. The log says which path runs.\n"
    "\n"
    "## Versions\n"
    "\n"
    "`\"version\"` comes first in every file and is not an editable key. This build writes "
    "version 1.\n"
    "Older files are migrated forward on load, one version at a time, and are written back "
    "with the\n"
    "current version when saved:\n"
    "\n"
    "- version 0 (the spellings of Cohort's seeds and of PyTorch DDP scripts: `multi_gpu`, "
    "`lr`,\n"
    "  `use_amp`, `gpu_ids`, …) becomes version 1 by the table under \"Older spellings\" at the "
    "end.\n"
    "\n"
    "A file with a version newer than the build is refused with both versions named; a file "
    "without\n"
    "`\"version\"` is refused with the advice to add `\"version\": 1`. Files are saved "
    "atomically (a\n"
    "temporary file in the same folder, synced, then renamed), so a failed save leaves the old "
    "file\n"
    "as it was.\n"
    "\n"
    "## Overriding keys with `--set`\n"
    "\n"
    "`cohort-train --set key=value` changes one key after the config or preset is read; the "
    "option\n"
    "repeats and the assignments apply in order. Values are written as on the command line, "
    "without\n"
    "JSON quoting:\n"
    "\n"
    "| type | example |\n"
    "| --- | --- |\n"
    "| integer | `--set n_layer=6` |\n"
    "| number | `--set learning_rate=3e-4` |\n"
    "| boolean | `--set shuffle=false` |\n"
    "| string | `--set \"sample_prompt=Once upon a time\"` (everything after the first `=`) |\n"
    "| choice | `--set lr_schedule=linear` |\n"
    "| list of integers | `--set device_indexes=0,1,2` (or `[0,1,2]`; empty for `[]`) |\n"
    "\n"
    "Each assignment is checked on its own and against the rules across keys, so the order can "
    "matter:\n"
    "to go from 4 heads of width 256 to 12 heads of width 768, set `n_embd` before `n_head`, "
    "and set\n"
    "`data_format=tokens` before a `vocab_size` other than 256.\n"
    "\n"
    "## Data files\n"
    "\n"
    "`train_data` and `val_data` name a regular file or a folder of regular files (read in name "
    "order:\n"
    "`.txt` files for text, `.bin` files for token shards; sub-folders are passed over). A "
    "path that\n"
    "names nothing is a pattern (`*`, `?`, `[...]`, as the shell has them), so one folder can "
    "hold both\n"
    "splits as llm.c lays them out: `\"train_data\": \"fineweb10B/fineweb_train_*.bin\"`, "
    "`\"val_data\":\n"
    "\"fineweb10B/fineweb_val_*.bin\"`; the files it matches are read in name order, and one "
    "that matches\n"
    "nothing is an error. A FIFO, "
    "a device\n"
    "or a socket is refused, never opened. Every token is checked against `vocab_size` when a "
    "file is\n"
    "first read, and the check is recorded in `<workspace_dir>/cache/data-index.txt` with the "
    "file's\n"
    "inode, size, modification and change times and a hash of sampled blocks: an unchanged "
    "file is not\n"
    "scanned again, a rewritten one is. Each training window is checked again as it is read, "
    "so a file\n"
    "that changes during a run stops it with the file and the byte offset named instead of "
    "giving the\n"
    "model a token outside the vocabulary.\n"
    "\n"
    "## Presets\n"
    "\n"
    "A preset is a TrainConfig file with a name. `--preset NAME` looks for `NAME.json` in two "
    "folders,\n"
    "the user's first, so a user preset with a built-in name replaces the built-in one:\n"
    "\n"
    "1. the user's presets: `$XDG_CONFIG_HOME/cohort/presets/` (usually "
    "`~/.config/cohort/presets/`);\n"
    "2. the built-in presets: `presets/` in Cohort's data folder, which is `$COHORT_DATA_DIR` "
    "when set,\n"
    "   else the installed `<prefix>/share/cohort/` (when it holds presets), else `data/` of "
    "the source\n"
    "   tree when running from a build folder.\n"
    "\n"
    "Data paths that start with `builtin:` name files under the same data folder, like\n"
    "`builtin:sample/train.txt`. The built-in presets:\n"
    "\n"
    "- `tiny-gpt` (the defaults below): a 4-layer, 256-wide GPT on byte-level text that ships "
    "with\n"
    "  Cohort; it trains on a CPU in minutes, with no download.\n"
    "- `gpt2-124m`: GPT-2 small (12 layers, 12 heads, width 768, context 1024, vocabulary "
    "50257) on\n"
    "  GPUs with bf16 and NCCL, after llm.c's recipe (16 sequences x 32 accumulation steps x "
    "1024\n"
    "  tokens = 524,288 tokens per step and process, cosine schedule, 18865 steps). It reads "
    "token\n"
    "  shards in llm.c's `.bin` format from the folders `fineweb10B/train` and "
    "`fineweb10B/val`,\n"
    "  relative to where training starts. Cohort does not download them: produce them with "
    "llm.c's\n"
    "  FineWeb data script (the GPT-2 tokenizer, 10B-token sample), or from your own text with\n"
    "  `cohort-tokenize` ([data.md](data.md)), and put the `*train*.bin` and `*val*.bin` shards "
    "into\n"
    "  those two folders, or set `train_data` and `val_data` to where they are.\n"
    "- `gpt2-finetune`: fine-tunes GPT-2 124M from a Hugging Face folder (`init_from` `gpt2`, "
    "its\n"
    "  tokenizer with it) on text in `my-text/train` and `my-text/val`, one NCCL rank per GPU "
    "found;\n"
    "  [data.md](data.md) says where to get the weights and how to use the larger sizes.\n"
    "\n"
    "## Keys\n";

static const char *type_name(CohortKeyType type)
{
  switch (type) {
  case COHORT_KEY_INT:
  case COHORT_KEY_INT64:
    return "integer";
  case COHORT_KEY_DOUBLE:
    return "number";
  case COHORT_KEY_BOOL:
    return "boolean";
  case COHORT_KEY_STRING:
    return "string";
  case COHORT_KEY_CHOICE:
    return "choice";
  case COHORT_KEY_INT_LIST:
    return "list of integers";
  }
  return "?";
}

/* Table cells: a '|' would end the cell early. */
static void append_cell(GString *out, const char *text)
{
  for (const char *p = text; *p; p++) {
    if (*p == '|')
      g_string_append_c(out, '\\');
    g_string_append_c(out, *p);
  }
}

static void append_default(GString *out, const CohortConfigKey *key)
{
  const char *def = cohort_config_key_default(key);
  g_string_append_c(out, '`');
  if (key->type == COHORT_KEY_STRING || key->type == COHORT_KEY_CHOICE)
    g_string_append_printf(out, "\"%s\"", def);
  else if (key->type == COHORT_KEY_INT_LIST)
    g_string_append_printf(out, "[%s]", def);
  else
    g_string_append(out, def);
  g_string_append_c(out, '`');
}

char *cohort_config_doc_markdown(void)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  GString *out = g_string_new(intro);
  const char *page = NULL;
  for (guint i = 0; i < n; i++) {
    const CohortConfigKey *k = &keys[i];
    if (!page || strcmp(page, k->page) != 0) {
      page = k->page;
      g_string_append_printf(out, "\n### %c%s\n\n", g_ascii_toupper(page[0]), page + 1);
      g_string_append(out, "| key | type | default | allowed | meaning |\n");
      g_string_append(out, "| --- | --- | --- | --- | --- |\n");
    }
    g_string_append_printf(out, "| `%s` | %s | ", k->name, type_name(k->type));
    append_default(out, k);
    g_string_append(out, " | ");
    append_cell(out, k->allowed);
    g_string_append(out, " | ");
    append_cell(out, k->help);
    g_string_append(out, " |\n");
  }
  g_string_append(out, "\n## Older spellings\n\n"
                       "A file of version 0 may use these keys; on load each becomes the current "
                       "key (giving both\nis an error). In a file of version 1 they are unknown "
                       "keys, and the error names the current one.\n\n");
  config_append_spellings_doc(out);
  return g_string_free(out, FALSE);
}
