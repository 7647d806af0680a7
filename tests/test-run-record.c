/* The run record (events.jsonl and TensorBoard event files): CRC-32C against the standard
 * check values; a synthetic progress stream recorded and read back with an independent
 * TFRecord + protobuf reader (every CRC, every tag, value and step against the stream);
 * events.jsonl equal to the stream plus "run_id"; resuming continues the same files after a
 * kill tore their tails; damage is not cut; bad ids and a stream aimed at events.jsonl are
 * refused; and the real cohort-train end to end. */
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "engine/progress/progress.h"
#include "engine/progress/run-record.h"
#include "engine/progress/tensorboard.h"
#include "engine/progress/tfrecord.h"
#include "test-util.h"
#include "train-run.h"
#include "run-record-check.h"

static void test_crc32c(void)
{
  g_assert_cmphex(cohort_crc32c(0, "123456789", 9), ==, 0xe3069283);
  /* RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of ones, and ascending 0..31. */
  guint8 buf[32];
  memset(buf, 0, sizeof buf);
  g_assert_cmphex(cohort_crc32c(0, buf, 32), ==, 0x8a9136aa);
  memset(buf, 0xff, sizeof buf);
  g_assert_cmphex(cohort_crc32c(0, buf, 32), ==, 0x62a8ab43);
  for (int i = 0; i < 32; i++)
    buf[i] = (guint8)i;
  g_assert_cmphex(cohort_crc32c(0, buf, 32), ==, 0x46dd794e);
  /* Continuing a CRC over a second part equals one pass. */
  g_assert_cmphex(cohort_crc32c(cohort_crc32c(0, "12345", 5), "6789", 4), ==, 0xe3069283);
  g_assert_cmphex(tbr_crc32c("123456789", 9), ==, 0xe3069283);
}

/* ---- a synthetic stream through a real CohortProgress ---- */

typedef struct {
  char *dir;
  char *ws;
  char *stream; /* the --progress-fd file */
} Fixture;

static void fixture_init(Fixture *f)
{
  f->dir = tu_mkdtemp("run-record");
  f->ws = g_build_filename(f->dir, "ws", NULL);
  f->stream = g_build_filename(f->dir, "progress.jsonl", NULL);
}

static void fixture_clear(Fixture *f)
{
  tu_rm_rf(f->dir);
  g_free(f->dir);
  g_free(f->ws);
  g_free(f->stream);
}

/* A short run's events: fp16 steps (one without loss or grad_norm, as after an overflow),
 * evals with extra metrics, a ranks report, and every other event type. `from` is the first
 * step (a resumed run starts after its checkpoint). */
static void emit_run(CohortProgress *p, int from, int to)
{
  g_autofree char *start =
      g_strdup_printf("{\"run\":\"ws\",\"model\":\"gpt\",\"start_step\":%d,\"resumed_from\":%s}",
                      from, from ? "\"ws/checkpoints/step-x\"" : "null");
  cohort_progress_emit(p, "start", obj_of(start));
  for (int s = from + 1; s <= to; s++) {
    g_autofree char *step =
        s == from + 2
            ? g_strdup_printf("{\"step\":%d,\"lr\":%.6f,\"tokens_per_s\":512.25,"
                              "\"loss_scale\":32768,\"skipped\":true}",
                              s, 1e-4 * s)
            : g_strdup_printf("{\"step\":%d,\"total_steps\":%d,\"loss\":%.9f,\"lr\":%.6f,"
                              "\"grad_norm\":%.5f,\"tokens_per_s\":%.3f,\"samples_per_s\":%d,"
                              "\"eta_s\":3.5,\"loss_scale\":65536,\"skipped\":false,"
                              "\"loss_distill\":0.75,\"loss_task\":1.5}",
                              s, to, 5.0 / s + 1e-7, 1e-4 * s, 0.5 + s * 0.01, 1000.0 + s, 30 + s);
    cohort_progress_emit(p, "step", obj_of(step));
    if (s % 3 == 0) {
      g_autofree char *eval = g_strdup_printf(
          "{\"step\":%d,\"val_loss\":%.8f,\"val_tokens\":4096,\"accuracy\":0.%d,\"ema\":false}", s,
          4.0 / s, s);
      cohort_progress_emit(p, "eval", obj_of(eval));
      g_autofree char *ranks = g_strdup_printf(
          "{\"step\":%d,\"ranks\":[{\"rank\":0,\"host\":\"h\",\"step_s\":0.25,\"data_s\":0.001,"
          "\"comm_s\":0.05,\"mem_bytes\":1048576},{\"rank\":1,\"host\":\"h\",\"step_s\":0.3%d,"
          "\"data_s\":0.002,\"comm_s\":0.0125,\"mem_bytes\":2097152,\"gpu_util\":97}],"
          "\"slowest\":1}",
          s, s);
      cohort_progress_emit(p, "ranks", obj_of(ranks));
    }
  }
  cohort_progress_emit(p, "sample", obj_of("{\"step\":4,\"prompt\":\"a\",\"text\":\"a \\u00e9\"}"));
  /* An event that carries the run id itself (the engine's `start` does): kept, not doubled. */
  g_autofree char *ck =
      g_strdup_printf("{\"step\":4,\"run_id\":\"%s\",\"path\":\"ws/checkpoints/x\"}",
                      cohort_run_record_run_id(cohort_progress_get_recorder(p)));
  cohort_progress_emit(p, "checkpoint", obj_of(ck));
  cohort_progress_log(p, "info", "a log line with \"quotes\"");
  cohort_progress_emit(p, "error", obj_of("{\"rank\":1,\"message\":\"all_reduce failed\"}"));
  cohort_progress_emit(p, "done", obj_of("{\"status\":\"failed\"}"));
}

/* Records a run with `run_id` into f->ws, the stream appended to f->stream. */
static void record_run(Fixture *f, const char *run_id, int from, int to)
{
  int fd = open(f->stream, O_WRONLY | O_CREAT | O_APPEND, 0644);
  g_assert_cmpint(fd, >=, 0);
  g_autoptr(CohortProgress) p = cohort_progress_new(fd, FALSE);
  cohort_progress_set_recorder(p, cohort_run_record_new());
  /* Set-up messages come before the run id is known: held, then recorded. */
  cohort_progress_log(p, "info", "before the record opens");
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_progress_open_record(p, f->ws, run_id, &error));
  g_assert_no_error(error);
  CohortRunRecord *rec = cohort_progress_get_recorder(p);
  g_assert_true(cohort_run_record_is_open(rec));
  g_assert_false(cohort_progress_open_record(p, f->ws, "other", &error));
  g_assert_nonnull(strstr(error->message, "the run record is already open for run "));
  g_clear_error(&error);
  emit_run(p, from, to);
  close(fd);
}

static void test_synthetic_stream(void)
{
  Fixture f;
  fixture_init(&f);
  record_run(&f, "run-a", 0, 8);
  g_auto(GStrv) stream = read_lines(f.stream);
  g_autofree char *events_path = g_build_filename(f.ws, "events.jsonl", NULL);
  g_auto(GStrv) events = read_lines(events_path);
  g_autofree const char **ids = g_new0(const char *, g_strv_length(stream) + 1);
  for (guint i = 0; stream[i]; i++)
    ids[i] = "run-a";
  check_events_equal_stream(stream, events, ids);
  g_assert_nonnull(strstr(events[0], "before the record opens"));
  g_assert_true(g_str_has_prefix(events[g_strv_length(events) - 1], "{\"event\":\"done\""));

  g_autofree char *tb_dir = g_build_filename(f.ws, "tensorboard", "run-a", NULL);
  g_autofree char *tb = only_file(tb_dir);
  g_autofree char *base = g_path_get_basename(tb);
  g_assert_true(g_str_has_prefix(base, "events.out.tfevents."));
  g_assert_true(g_str_has_suffix(base, g_get_host_name()));
  g_autoptr(GPtrArray) got = tbr_read_file(tb);
  g_assert_cmpuint(got->len, >=, 1);
  TbrEvent *head = g_ptr_array_index(got, 0);
  g_assert_cmpstr(head->file_version, ==, "brain.Event:2");
  g_autoptr(GPtrArray) want = expected_tb(stream);
  /* 8 steps, 2 evals, 2 ranks reports. */
  g_assert_cmpuint(want->len, ==, 12);
  check_tb_equal(got, 1, want);
  /* The tags the documentation promises, spelled out. */
  const char *tags[] = {"train/loss",
                        "train/lr",
                        "train/grad_norm",
                        "train/tokens_per_s",
                        "train/samples_per_s",
                        "train/loss_scale",
                        "train/loss_distill",
                        "train/loss_task",
                        "eval/val_loss",
                        "eval/val_tokens",
                        "eval/accuracy",
                        "rank/0/step_s",
                        "rank/1/comm_s",
                        "rank/1/data_s",
                        "rank/0/mem_bytes",
                        "rank/1/gpu_util",
                        NULL};
  for (guint t = 0; tags[t]; t++) {
    gboolean seen = FALSE;
    for (guint i = 1; i < got->len && !seen; i++) {
      float v;
      seen = tbr_event_lookup(g_ptr_array_index(got, i), tags[t], &v);
    }
    if (!seen)
      g_error("no %s in %s", tags[t], tb);
  }
  float v = NAN;
  g_assert_true(tbr_event_lookup(g_ptr_array_index(got, 1), "train/loss", &v));
  g_assert_cmpfloat(v, ==, (float)(5.0 / 1 + 1e-7));
  g_assert_false(tbr_event_lookup(g_ptr_array_index(got, 2), "train/loss", &v));
  fixture_clear(&f);
}

static void append_bytes(const char *path, const void *data, gsize len)
{
  int fd = open(path, O_WRONLY | O_APPEND);
  g_assert_cmpint(fd, >=, 0);
  g_assert_cmpint(write(fd, data, len), ==, (gssize)len);
  close(fd);
}

static gsize file_size(const char *path)
{
  GStatBuf st;
  g_assert_cmpint(g_stat(path, &st), ==, 0);
  return (gsize)st.st_size;
}

/* A kill mid-write leaves half a record and half a line; the resumed run (same id) cuts
 * both, says so, and continues the same files; its START purges the redone steps. */
static void test_resume_continues_files(void)
{
  Fixture f;
  fixture_init(&f);
  record_run(&f, "run-r", 0, 6);
  g_autofree char *events_path = g_build_filename(f.ws, "events.jsonl", NULL);
  g_autofree char *tb_dir = g_build_filename(f.ws, "tensorboard", "run-r", NULL);
  g_autofree char *tb = only_file(tb_dir);
  gsize tb_len = file_size(tb), ev_len = file_size(events_path);
  g_autoptr(GByteArray) rec = g_byte_array_new();
  cohort_tfrecord_append(rec, "0123456789abcdef", 16);
  append_bytes(tb, rec->data, rec->len - 7);
  append_bytes(events_path, "{\"event\":\"step\",\"ti", 19);

  /* The stream file of the second process starts empty, like a new --progress-fd. */
  g_autofree char *first_stream = g_strconcat(f.stream, ".1", NULL);
  g_assert_cmpint(g_rename(f.stream, first_stream), ==, 0);
  int fd = open(f.stream, O_WRONLY | O_CREAT | O_APPEND, 0644);
  g_autoptr(CohortProgress) p = cohort_progress_new(fd, FALSE);
  cohort_progress_set_recorder(p, cohort_run_record_new());
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_progress_open_record(p, f.ws, "run-r", &error));
  g_assert_no_error(error);
  g_assert_cmpstr(cohort_run_record_tb_path(cohort_progress_get_recorder(p)), ==, tb);
  emit_run(p, 4, 9);
  g_clear_pointer(&p, cohort_progress_free);
  close(fd);

  /* The repairs reached the stream (and the record) as warnings naming the files. */
  g_auto(GStrv) stream2 = read_lines(f.stream);
  g_assert_nonnull(strstr(stream2[0], "\"level\":\"warning\""));
  g_assert_nonnull(strstr(stream2[0], "events.jsonl: removed an incomplete last line (19 bytes)"));
  g_assert_nonnull(strstr(stream2[1], "removed an incomplete last record (25 bytes)"));

  /* events.jsonl: the first run's lines, then the second's; nothing glued. */
  g_auto(GStrv) stream1 = read_lines(first_stream);
  g_auto(GStrv) events = read_lines(events_path);
  g_auto(GStrv) all = concat_lines(stream1, stream2);
  g_autofree const char **ids = g_new0(const char *, g_strv_length(all) + 1);
  for (guint i = 0; all[i]; i++)
    ids[i] = "run-r";
  check_events_equal_stream(all, events, ids);
  g_assert_cmpuint(file_size(events_path), >, ev_len);

  /* TensorBoard: still one file; its first bytes untouched; every record checks. */
  g_autofree char *tb_again = only_file(tb_dir);
  g_assert_cmpstr(tb_again, ==, tb);
  g_autoptr(GPtrArray) got = tbr_read_file(tb);
  g_autoptr(GPtrArray) want = expected_tb(all);
  /* The resumed start (start_step 4) is a SessionLog START at step 5. */
  gboolean start_seen = FALSE;
  for (guint i = 0; i < want->len; i++) {
    TbrEvent *e = g_ptr_array_index(want, i);
    if (e->session_status == 1) {
      g_assert_cmpint(e->step, ==, 5);
      start_seen = TRUE;
    }
  }
  g_assert_true(start_seen);
  check_tb_equal(got, 1, want);
  g_assert_cmpuint(file_size(tb), >, tb_len);

  /* Another run id: its own folder, and its lines after the others in events.jsonl. */
  record_run(&f, "run-b", 0, 2);
  g_autofree char *tb_b_dir = g_build_filename(f.ws, "tensorboard", "run-b", NULL);
  g_autofree char *tb_b = only_file(tb_b_dir);
  g_autoptr(GPtrArray) got_b = tbr_read_file(tb_b);
  g_assert_cmpuint(got_b->len, ==, 1 + 2);
  g_auto(GStrv) events3 = read_lines(events_path);
  g_assert_cmpuint(g_strv_length(events3), >, g_strv_length(events));
  g_assert_true(g_str_has_suffix(events3[g_strv_length(events)], ",\"run_id\":\"run-b\"}"));
  fixture_clear(&f);
}

/* A record with a bad checksum inside a file is damage, not a torn write: the file is left
 * byte for byte and the run goes on in a new file beside it. */
static void test_damage_is_not_cut(void)
{
  Fixture f;
  fixture_init(&f);
  record_run(&f, "run-d", 0, 4);
  g_autofree char *tb_dir = g_build_filename(f.ws, "tensorboard", "run-d", NULL);
  g_autofree char *tb = only_file(tb_dir);
  g_autofree char *bytes = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(tb, &bytes, &len, NULL));
  bytes[len / 2] ^= 0x40;
  g_assert_true(g_file_set_contents(tb, bytes, (gssize)len, NULL));

  int fd = open(tb, O_RDONLY);
  CohortTfrecordScan scan;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_tfrecord_scan(fd, tb, &scan, NULL, &error));
  close(fd);
  g_assert_true(scan.corrupt);
  g_assert_false(scan.torn_tail);
  g_assert_cmpuint(scan.good_length, <, len / 2 + 1);

  g_autoptr(CohortRunRecord) rec = cohort_run_record_new();
  g_autoptr(GPtrArray) notes = g_ptr_array_new_with_free_func(g_free);
  g_assert_true(cohort_run_record_open(rec, f.ws, "run-d", notes, &error));
  g_assert_no_error(error);
  g_assert_cmpuint(notes->len, ==, 1);
  g_assert_nonnull(strstr(g_ptr_array_index(notes, 0), "a record with a bad checksum"));
  g_assert_cmpstr(cohort_run_record_tb_path(rec), !=, tb);
  g_autofree char *after = NULL;
  gsize after_len = 0;
  g_assert_true(g_file_get_contents(tb, &after, &after_len, NULL));
  g_assert_cmpmem(after, after_len, bytes, len);
  /* The new file is a valid event file of its own. */
  g_autoptr(GPtrArray) got = tbr_read_file(cohort_run_record_tb_path(rec));
  g_assert_cmpuint(got->len, ==, 1);
  fixture_clear(&f);
}

/* A process killed while writing an event file's first record: the file starts over. */
static void test_torn_first_record(void)
{
  g_autofree char *dir = tu_mkdtemp("tb-first");
  g_autofree char *path = g_build_filename(dir, "events.out.tfevents.100.somehost", NULL);
  g_autoptr(GByteArray) rec = g_byte_array_new();
  cohort_tfrecord_append(rec, "0123456789", 10);
  g_assert_true(g_file_set_contents(path, (char *)rec->data, 15, NULL));
  g_autofree char *note = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTbWriter) w = cohort_tb_writer_open(dir, &note, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(cohort_tb_writer_path(w), ==, path);
  g_assert_nonnull(strstr(note, "removed an incomplete last record (15 bytes)"));
  g_autoptr(CohortTbScalars) s = cohort_tb_scalars_new();
  cohort_tb_scalars_add(s, "train/loss", 2.5);
  g_assert_true(cohort_tb_writer_add(w, 1e9, 7, s, &error));
  g_autoptr(GPtrArray) got = tbr_read_file(path);
  g_assert_cmpuint(got->len, ==, 2);
  g_assert_cmpstr(((TbrEvent *)g_ptr_array_index(got, 0))->file_version, ==, "brain.Event:2");
  TbrEvent *e = g_ptr_array_index(got, 1);
  float v = 0;
  g_assert_true(tbr_event_lookup(e, "train/loss", &v));
  g_assert_cmpfloat(v, ==, 2.5f);
  g_assert_cmpint(e->step, ==, 7);
  g_assert_cmpfloat(e->wall_time, ==, 1e9);
  tu_rm_rf(dir);
}

/* Zeros after the last record (a crash before the data reached the disk) count as a torn
 * tail; so do a header alone and a record cut inside its data. */
static void test_scan_tails(void)
{
  g_autofree char *dir = tu_mkdtemp("tfrecord");
  g_autofree char *path = g_build_filename(dir, "f", NULL);
  g_autoptr(GByteArray) b = g_byte_array_new();
  cohort_tfrecord_append(b, "hello", 5);
  cohort_tfrecord_append(b, "", 0);
  guint good = b->len;
  struct {
    const char *what;
    guint extra; /* bytes of a third record kept, or of zeros */
    gboolean zeros;
  } cases[] = {{"whole", 0, FALSE},
               {"8 bytes of header", 8, FALSE},
               {"header and part of the data", 14, FALSE},
               {"all but the data CRC", 19, FALSE},
               {"4 KiB of zeros", 4096, TRUE}};
  for (guint c = 0; c < G_N_ELEMENTS(cases); c++) {
    g_autoptr(GByteArray) third = g_byte_array_new();
    cohort_tfrecord_append(third, "world!!", 7);
    g_autoptr(GByteArray) file = g_byte_array_new();
    g_byte_array_append(file, b->data, good);
    if (cases[c].zeros) {
      g_autofree guint8 *z = g_malloc0(cases[c].extra);
      g_byte_array_append(file, z, cases[c].extra);
    } else {
      g_byte_array_append(file, third->data, cases[c].extra);
    }
    g_assert_true(g_file_set_contents(path, (char *)file->data, file->len, NULL));
    int fd = open(path, O_RDONLY);
    CohortTfrecordScan scan;
    g_autoptr(GBytes) first = NULL;
    g_autoptr(GError) error = NULL;
    g_assert_true(cohort_tfrecord_scan(fd, path, &scan, &first, &error));
    close(fd);
    g_test_message("%s: %" G_GUINT64_FORMAT " records, good %" G_GUINT64_FORMAT, cases[c].what,
                   scan.records, scan.good_length);
    g_assert_cmpuint(scan.records, ==, 2);
    g_assert_cmpuint(scan.good_length, ==, good);
    g_assert_cmpint(scan.torn_tail, ==, cases[c].extra > 0);
    g_assert_false(scan.corrupt);
    g_assert_cmpmem(g_bytes_get_data(first, NULL), g_bytes_get_size(first), "hello", 5);
  }
  /* A record larger than the scan's 64 KiB pieces: checked across pieces, whole or cut. */
  g_autoptr(GByteArray) big = g_byte_array_new();
  g_autofree guint8 *data = g_malloc(150000);
  for (guint i = 0; i < 150000; i++)
    data[i] = (guint8)(i * 7 + i / 256);
  cohort_tfrecord_append(big, data, 150000);
  for (int cut = 0; cut < 3; cut++) {
    guint len = cut == 0 ? big->len : cut == 1 ? big->len - 4 : 100000;
    if (cut == 2)
      big->data[80000] ^= 1; /* not seen: the record is cut before its end anyway */
    g_assert_true(g_file_set_contents(path, (char *)big->data, len, NULL));
    int fd = open(path, O_RDONLY);
    CohortTfrecordScan scan;
    g_assert_true(cohort_tfrecord_scan(fd, path, &scan, NULL, NULL));
    close(fd);
    g_assert_cmpuint(scan.records, ==, cut == 0 ? 1 : 0);
    g_assert_cmpint(scan.torn_tail, ==, cut != 0);
    g_assert_false(scan.corrupt);
  }
  /* One flipped bit in the middle of the big record's data: damage. */
  g_assert_true(g_file_set_contents(path, (char *)big->data, big->len, NULL));
  int fd = open(path, O_RDONLY);
  CohortTfrecordScan scan;
  g_assert_true(cohort_tfrecord_scan(fd, path, &scan, NULL, NULL));
  close(fd);
  g_assert_cmpuint(scan.records, ==, 0);
  g_assert_true(scan.corrupt);
  tu_rm_rf(dir);
}

static void test_bad_run_id(void)
{
  Fixture f;
  fixture_init(&f);
  const char *bad[] = {"", "../x", "a/b", ".hidden", "sp ace", NULL};
  for (guint i = 0; bad[i]; i++) {
    g_autoptr(CohortRunRecord) rec = cohort_run_record_new();
    g_autoptr(GError) error = NULL;
    g_assert_false(cohort_run_record_open(rec, f.ws, bad[i], NULL, &error));
    g_assert_nonnull(error);
    g_autofree char *quoted = g_strdup_printf("run id \"%s\" is not allowed; allowed:", bad[i]);
    g_assert_true(g_str_has_prefix(error->message, quoted));
    g_assert_false(cohort_run_record_is_open(rec));
  }
  g_assert_false(g_file_test(f.ws, G_FILE_TEST_EXISTS));
  /* The ids the engine makes: 32 hex digits (checkpoints), a UUID (until those land). */
  const char *good[] = {"0123456789abcdef0123456789abcdef", "5f1c1a4e-4f61-4a55-9d2e-3c1d2b0a9e7f",
                        "run_B.2", NULL};
  for (guint i = 0; good[i]; i++)
    g_assert_true(cohort_run_id_check(good[i], NULL));
  fixture_clear(&f);
}

/* --progress-fd pointed at the workspace's events.jsonl would interleave two writers. */
static void test_stream_into_events_file(void)
{
  Fixture f;
  fixture_init(&f);
  g_assert_cmpint(g_mkdir_with_parents(f.ws, 0755), ==, 0);
  g_autofree char *events_path = g_build_filename(f.ws, "events.jsonl", NULL);
  int fd = open(events_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  g_autoptr(CohortProgress) p = cohort_progress_new(fd, FALSE);
  cohort_progress_set_recorder(p, cohort_run_record_new());
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_progress_open_record(p, f.ws, "run-x", &error));
  g_assert_nonnull(strstr(error->message, "events.jsonl, which the run writes itself"));
  close(fd);
  fixture_clear(&f);
}

/* The real engine: events.jsonl equals the --progress-fd stream plus one run id, and the
 * TensorBoard scalars equal its step and eval events; a second run in the same workspace
 * appends with a new id and its own folder. With two ranks (spawn mode), the per-rank
 * timings come out as rank/N/... scalars. */
static void run_engine(const char *ws, const char *stream, const char *const *extra)
{
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  RunResult r = run_train(args, stream);
  if (r.status != 0)
    g_error("cohort-train exited %d:\n%s", r.status, r.err);
  run_result_clear(&r);
}

static void check_engine_run(const char *ws, const char *stream, guint skip_lines, char **run_id,
                             guint *n_tb)
{
  g_auto(GStrv) lines = read_lines(stream);
  g_autofree char *events_path = g_build_filename(ws, "events.jsonl", NULL);
  g_auto(GStrv) all = read_lines(events_path);
  g_assert_cmpuint(g_strv_length(all), ==, skip_lines + g_strv_length(lines));
  g_autoptr(JsonObject) first = obj_of(all[skip_lines]);
  *run_id = g_strdup(json_object_get_string_member(first, "run_id"));
  g_autofree const char **ids = g_new0(const char *, g_strv_length(lines) + 1);
  for (guint i = 0; lines[i]; i++)
    ids[i] = *run_id;
  check_events_equal_stream(lines, all + skip_lines, ids);

  g_autofree char *tb_dir = g_build_filename(ws, "tensorboard", *run_id, NULL);
  g_autofree char *tb = only_file(tb_dir);
  g_autoptr(GPtrArray) got = tbr_read_file(tb);
  g_autoptr(GPtrArray) want = expected_tb(lines);
  check_tb_equal(got, 1, want);
  *n_tb = want->len;
}

/* A new run in a workspace that holds an earlier run's checkpoints is refused (or moves
 * them aside with --overwrite); events.jsonl and tensorboard/ stay, shared by all runs. */
static void forget_checkpoints(const char *ws)
{
  g_autofree char *ck = g_build_filename(ws, "checkpoints", NULL);
  tu_rm_rf(ck);
}

static void test_engine_end_to_end(void)
{
  g_autofree char *dir = tu_mkdtemp("run-record-e2e");
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *s1 = g_build_filename(dir, "progress-1.jsonl", NULL);
  g_autofree char *s2 = g_build_filename(dir, "progress-2.jsonl", NULL);
  const char *extra[] = {"--set", "max_steps=10", "--set", "eval_every=4", "-q", NULL};
  run_engine(ws, s1, extra);
  g_autofree char *id1 = NULL;
  guint n1 = 0;
  check_engine_run(ws, s1, 0, &id1, &n1);
  /* 10 steps, evals at 4, 8 and the end. */
  g_assert_cmpuint(n1, ==, 13);

  g_auto(GStrv) before = read_lines(s1);
  forget_checkpoints(ws);
  run_engine(ws, s2, extra);
  g_autofree char *id2 = NULL;
  guint n2 = 0;
  check_engine_run(ws, s2, g_strv_length(before), &id2, &n2);
  g_assert_cmpstr(id1, !=, id2);
  g_test_message("run ids %s, %s", id1, id2);

  /* Without --progress-fd the record is kept all the same. */
  g_autofree char *events_path = g_build_filename(ws, "events.jsonl", NULL);
  g_auto(GStrv) two = read_lines(events_path);
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  forget_checkpoints(ws);
  RunResult r = run_train(args, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_auto(GStrv) three = read_lines(events_path);
  guint n2_lines = g_strv_length(two), n3_lines = g_strv_length(three);
  g_assert_cmpuint(n3_lines - n2_lines, ==, g_strv_length(before));
  /* The third run's lines: one run id, a start, and one done that says completed. */
  g_autoptr(JsonObject) first3 = obj_of(three[n2_lines]);
  const char *id3 = json_object_get_string_member(first3, "run_id");
  g_assert_cmpstr(id3, !=, id2);
  guint starts = 0, dones = 0;
  for (guint i = n2_lines; i < n3_lines; i++) {
    g_autoptr(JsonObject) ev = obj_of(three[i]);
    const char *name = json_object_get_string_member(ev, "event");
    g_assert_cmpstr(json_object_get_string_member(ev, "run_id"), ==, id3);
    starts += g_str_equal(name, "start");
    if (g_str_equal(name, "done")) {
      dones++;
      g_assert_cmpstr(json_object_get_string_member(ev, "status"), ==, "completed");
    }
  }
  g_assert_cmpuint(starts, ==, 1);
  g_assert_cmpuint(dones, ==, 1);
  g_autofree char *tb3 = g_build_filename(ws, "tensorboard", id3, NULL);
  g_assert_true(g_file_test(tb3, G_FILE_TEST_IS_DIR));
  tu_rm_rf(dir);
}

static void test_engine_two_ranks(void)
{
  g_autofree char *dir = tu_mkdtemp("run-record-ranks");
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *s = g_build_filename(dir, "progress.jsonl", NULL);
  const char *extra[] = {"--set",   "max_steps=20",
                         "--set",   "eval_every=0",
                         "--set",   "sample_every=0",
                         "--set",   "distributed_backend=gloo",
                         "--nproc", "2",
                         "-q",      NULL};
  run_engine(ws, s, extra);
  g_autofree char *id = NULL;
  guint n = 0;
  check_engine_run(ws, s, 0, &id, &n);
  g_autofree char *tb_dir = g_build_filename(ws, "tensorboard", id, NULL);
  g_autofree char *tb = only_file(tb_dir);
  g_autoptr(GPtrArray) got = tbr_read_file(tb);
  guint with_ranks = 0;
  for (guint i = 0; i < got->len; i++) {
    float v;
    TbrEvent *e = g_ptr_array_index(got, i);
    if (tbr_event_lookup(e, "rank/1/step_s", &v)) {
      g_assert_true(tbr_event_lookup(e, "rank/0/comm_s", &v));
      g_assert_true(tbr_event_lookup(e, "rank/1/data_s", &v));
      with_ranks++;
    }
  }
  /* A ranks report every 10 steps. */
  g_assert_cmpuint(with_ranks, ==, 2);
  tu_rm_rf(dir);
}

/* Stopped (SIGTERM: a checkpoint) and resumed with --resume auto: the resumed run appends to
 * events.jsonl under the same run id and continues the same TensorBoard file, after a
 * SessionLog START at the step after its checkpoint. */
static void test_engine_resume(void)
{
  g_autofree char *dir = tu_mkdtemp("run-record-resume");
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *s1 = g_build_filename(dir, "progress-1.jsonl", NULL);
  g_autofree char *s2 = g_build_filename(dir, "progress-2.jsonl", NULL);
  const char *quiet[] = {"-q", NULL};
  g_autoptr(GPtrArray) args1 = small_args(ws, quiet);
  g_autoptr(GSubprocess) p = start_train(args1, s1);
  gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;
  for (;;) {
    g_autofree char *text = NULL;
    g_file_get_contents(s1, &text, NULL, NULL);
    if (text && strstr(text, "\"step\":7,"))
      break;
    g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    g_usleep(20000);
  }
  g_subprocess_send_signal(p, SIGTERM);
  RunResult r1 = finish_train(p);
  g_assert_cmpint(r1.status, ==, 143); /* stopped by SIGTERM, checkpoint saved */
  run_result_clear(&r1);
  const char *resume[] = {"--resume", "auto", "-q", NULL};
  run_engine(ws, s2, resume);

  g_auto(GStrv) c1 = read_lines(s1);
  g_auto(GStrv) c2 = read_lines(s2);
  g_auto(GStrv) all = concat_lines(c1, c2);
  g_autofree char *events_path = g_build_filename(ws, "events.jsonl", NULL);
  g_auto(GStrv) events = read_lines(events_path);
  guint n1 = g_strv_length(c1), n = g_strv_length(all);
  g_assert_cmpuint(g_strv_length(events), ==, n);
  g_autoptr(JsonObject) first1 = obj_of(events[0]);
  g_autoptr(JsonObject) first2 = obj_of(events[n1]);
  const char *id1 = json_object_get_string_member(first1, "run_id");
  const char *id2 = json_object_get_string_member(first2, "run_id");
  g_autofree const char **ids = g_new0(const char *, n + 1);
  for (guint i = 0; i < n; i++)
    ids[i] = i < n1 ? id1 : id2;
  check_events_equal_stream(all, events, ids);
  if (!g_str_equal(id1, id2)) {
    g_test_skip("this engine gives a resumed run a new run id (the trainer's placeholder)");
    tu_rm_rf(dir);
    return;
  }
  g_autofree char *tb_dir = g_build_filename(ws, "tensorboard", id1, NULL);
  g_autofree char *tb = only_file(tb_dir);
  g_autoptr(GPtrArray) got = tbr_read_file(tb);
  g_autoptr(GPtrArray) want = expected_tb(all);
  check_tb_equal(got, 1, want);
  g_autoptr(JsonObject) start2 = obj_of(c2[0]);
  gint64 from = json_object_get_int_member(start2, "start_step");
  g_assert_cmpint(from, >=, 7);
  guint restarts = 0;
  for (guint i = 0; i < got->len; i++) {
    TbrEvent *e = g_ptr_array_index(got, i);
    if (e->session_status == 1) {
      g_assert_cmpint(e->step, ==, from + 1);
      restarts++;
    }
  }
  g_assert_cmpuint(restarts, ==, 1);
  tu_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/run-record/crc32c", test_crc32c);
  g_test_add_func("/run-record/synthetic-stream", test_synthetic_stream);
  g_test_add_func("/run-record/resume-continues-files", test_resume_continues_files);
  g_test_add_func("/run-record/damage-is-not-cut", test_damage_is_not_cut);
  g_test_add_func("/run-record/scan-tails", test_scan_tails);
  g_test_add_func("/run-record/torn-first-record", test_torn_first_record);
  g_test_add_func("/run-record/bad-run-id", test_bad_run_id);
  g_test_add_func("/run-record/stream-into-events-file", test_stream_into_events_file);
  g_test_add_func("/run-record/engine-end-to-end", test_engine_end_to_end);
  g_test_add_func("/run-record/engine-two-ranks", test_engine_two_ranks);
  g_test_add_func("/run-record/engine-resume", test_engine_resume);
  return g_test_run();
}
