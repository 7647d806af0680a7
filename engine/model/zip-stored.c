/* ZIP directories and stored entries (APPNOTE.TXT 6.3: end of central directory, ZIP64 end
 * record and locator, central file headers, local file headers). */
#include "engine/model/zip-stored.h"

#include <string.h>
#include <zlib.h>

/* clang-format off */
G_DEFINE_QUARK(cohort-zip-error-quark, cohort_zip_error)
/* clang-format on */

#define SIG_LOCAL   0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END     0x06054b50u
#define SIG_END64   0x06064b50u
#define SIG_LOC64   0x07064b50u

struct CohortZip {
  const guint8 *data;
  guint64 size;
  GArray *entries;    /* of CohortZipEntry */
  GHashTable *byname; /* name → index + 1 */
  guint8 *checked;    /* CRC verified, per entry */
};

static guint16 le16(const guint8 *p)
{
  return (guint16)(p[0] | p[1] << 8);
}

static guint32 le32(const guint8 *p)
{
  return (guint32)p[0] | (guint32)p[1] << 8 | (guint32)p[2] << 16 | (guint32)p[3] << 24;
}

static guint64 le64(const guint8 *p)
{
  return (guint64)le32(p) | (guint64)le32(p + 4) << 32;
}

static gboolean fail(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static gboolean fail(GError **error, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error_literal(error, COHORT_ZIP_ERROR, 0, msg);
  return FALSE;
}

/* [off, off + len) lies inside the buffer. */
static gboolean inside(const CohortZip *z, guint64 off, guint64 len)
{
  return off <= z->size && len <= z->size - off;
}

typedef struct {
  guint64 entries, cd_offset, cd_size;
} Directory;

/* The end of central directory record: the last signature in the final 64 KiB + 22 bytes. */
static gboolean find_end(const CohortZip *z, guint64 *at, GError **error)
{
  if (z->size < 22)
    return fail(error, "%" G_GUINT64_FORMAT " bytes is too short for a ZIP archive", z->size);
  guint64 lo = z->size > 22 + 65535 ? z->size - 22 - 65535 : 0;
  for (guint64 p = z->size - 22 + 1; p-- > lo;)
    if (le32(z->data + p) == SIG_END && p + 22 + le16(z->data + p + 20) == z->size) {
      *at = p;
      return TRUE;
    }
  return fail(error, "no ZIP end-of-directory record (truncated, or not a ZIP archive)");
}

static gboolean read_directory(const CohortZip *z, Directory *d, GError **error)
{
  guint64 end = 0;
  if (!find_end(z, &end, error))
    return FALSE;
  const guint8 *e = z->data + end;
  if (le16(e + 4) != 0 || le16(e + 6) != 0)
    return fail(error, "a ZIP archive split over several disks");
  d->entries = le16(e + 10);
  d->cd_size = le32(e + 12);
  d->cd_offset = le32(e + 16);
  if (d->entries != 0xFFFF && d->cd_size != 0xFFFFFFFFu && d->cd_offset != 0xFFFFFFFFu)
    return TRUE;
  /* ZIP64: the locator just before the record points at the ZIP64 end record. */
  if (end < 20 || le32(e - 20) != SIG_LOC64)
    return fail(error, "a ZIP64 archive without its ZIP64 locator");
  guint64 rec = le64(e - 20 + 8);
  if (!inside(z, rec, 56) || rec + 56 > end - 20 || le32(z->data + rec) != SIG_END64)
    return fail(error, "the ZIP64 end record is outside the archive or damaged");
  const guint8 *r = z->data + rec;
  d->entries = le64(r + 32);
  d->cd_size = le64(r + 40);
  d->cd_offset = le64(r + 48);
  return TRUE;
}

/* The ZIP64 extra field's sizes and offset, where the central header says 0xFFFFFFFF. */
static gboolean zip64_extra(const guint8 *x, guint len, guint64 *usize, guint64 *csize,
                            guint64 *offset)
{
  for (guint p = 0; p + 4 <= len;) {
    guint id = le16(x + p), n = le16(x + p + 2);
    if (p + 4 + n > len)
      return FALSE;
    if (id == 1) {
      guint64 *want[3] = {usize, csize, offset};
      guint q = p + 4;
      for (int i = 0; i < 3; i++) {
        if (*want[i] != 0xFFFFFFFFu)
          continue;
        if (q + 8 > p + 4 + n)
          return FALSE;
        *want[i] = le64(x + q);
        q += 8;
      }
      return TRUE;
    }
    p += 4 + n;
  }
  return *usize != 0xFFFFFFFFu && *csize != 0xFFFFFFFFu && *offset != 0xFFFFFFFFu;
}

/* One central header at *pos: checks it and its local header, appends the entry. */
static gboolean read_entry(CohortZip *z, guint64 *pos, guint64 cd_end, GError **error)
{
  if (*pos + 46 > cd_end || le32(z->data + *pos) != SIG_CENTRAL)
    return fail(error, "a damaged ZIP central directory entry at byte %" G_GUINT64_FORMAT, *pos);
  const guint8 *c = z->data + *pos;
  guint flags = le16(c + 8), method = le16(c + 10);
  guint n_name = le16(c + 28), n_extra = le16(c + 30), n_comment = le16(c + 32);
  guint64 csize = le32(c + 20), usize = le32(c + 24), local = le32(c + 42);
  if (*pos + 46 + n_name + n_extra + n_comment > cd_end)
    return fail(error, "a ZIP central directory entry runs past the directory");
  if (n_name == 0 || n_name > COHORT_ZIP_MAX_NAME)
    return fail(error, "a ZIP entry name of %u bytes; allowed: 1 to %d", n_name,
                COHORT_ZIP_MAX_NAME);
  g_autofree char *name = g_strndup((const char *)c + 46, n_name);
  if (strlen(name) != n_name || !g_utf8_validate(name, -1, NULL))
    return fail(error, "a ZIP entry name that is not UTF-8 text");
  if (!zip64_extra(c + 46 + n_name, n_extra, &usize, &csize, &local))
    return fail(error, "entry \"%s\": a damaged ZIP64 extra field", name);
  if (flags & 1)
    return fail(error, "entry \"%s\" is encrypted", name);
  if (method != 0 || csize != usize)
    return fail(error,
                "entry \"%s\" is compressed (method %u); torch.save stores entries "
                "uncompressed: save the weights again with torch.save",
                name, method);
  if (!inside(z, local, 30) || le32(z->data + local) != SIG_LOCAL)
    return fail(error, "entry \"%s\": its local header is outside the archive or damaged", name);
  guint64 data = local + 30 + le16(z->data + local + 26) + le16(z->data + local + 28);
  if (!inside(z, data, usize) || data + usize > z->size)
    return fail(error, "entry \"%s\": its %" G_GUINT64_FORMAT " bytes lie outside the archive",
                name, usize);
  if (g_hash_table_contains(z->byname, name))
    return fail(error, "entry \"%s\" appears twice", name);
  CohortZipEntry ent = {
      .name = g_steal_pointer(&name), .offset = data, .size = usize, .crc32 = le32(c + 16)};
  g_array_append_val(z->entries, ent);
  g_hash_table_insert(z->byname, ent.name, GUINT_TO_POINTER(z->entries->len));
  *pos += 46 + n_name + n_extra + n_comment;
  return TRUE;
}

static void entry_clear(gpointer p)
{
  g_free(((CohortZipEntry *)p)->name);
}

CohortZip *cohort_zip_open(const guint8 *data, guint64 size, GError **error)
{
  g_autoptr(CohortZip) z = g_new0(CohortZip, 1);
  z->data = data;
  z->size = size;
  z->entries = g_array_new(FALSE, TRUE, sizeof(CohortZipEntry));
  g_array_set_clear_func(z->entries, entry_clear);
  z->byname = g_hash_table_new(g_str_hash, g_str_equal);
  Directory d = {0};
  if (!read_directory(z, &d, error))
    return NULL;
  if (!inside(z, d.cd_offset, d.cd_size))
    return fail(error, "the ZIP central directory lies outside the archive"), NULL;
  /* Each entry takes at least 46 bytes of directory: a count beyond that is a lie. */
  if (d.entries > COHORT_ZIP_MAX_ENTRIES || d.entries > d.cd_size / 46)
    return fail(error,
                "%" G_GUINT64_FORMAT " ZIP entries; allowed: up to %d that fit the directory",
                d.entries, COHORT_ZIP_MAX_ENTRIES),
           NULL;
  guint64 pos = d.cd_offset, end = d.cd_offset + d.cd_size;
  for (guint64 i = 0; i < d.entries; i++)
    if (!read_entry(z, &pos, end, error))
      return NULL;
  z->checked = g_new0(guint8, MAX(z->entries->len, 1));
  return g_steal_pointer(&z);
}

void cohort_zip_free(CohortZip *z)
{
  if (!z)
    return;
  if (z->entries)
    g_array_free(z->entries, TRUE);
  if (z->byname)
    g_hash_table_destroy(z->byname);
  g_free(z->checked);
  g_free(z);
}

guint cohort_zip_count(const CohortZip *z)
{
  return z->entries->len;
}

const CohortZipEntry *cohort_zip_entry(const CohortZip *z, guint i)
{
  g_return_val_if_fail(i < z->entries->len, NULL);
  return &g_array_index(z->entries, CohortZipEntry, i);
}

const CohortZipEntry *cohort_zip_find(const CohortZip *z, const char *name)
{
  guint i = GPOINTER_TO_UINT(g_hash_table_lookup(z->byname, name));
  return i ? &g_array_index(z->entries, CohortZipEntry, i - 1) : NULL;
}

const guint8 *cohort_zip_data(CohortZip *z, const CohortZipEntry *e, GError **error)
{
  guint i = (guint)(e - &g_array_index(z->entries, CohortZipEntry, 0));
  g_return_val_if_fail(i < z->entries->len, NULL);
  const guint8 *p = z->data + e->offset;
  if (!z->checked[i]) {
    guint32 crc = e->size ? (guint32)crc32_z(0, p, (z_size_t)e->size) : 0;
    if (crc != e->crc32)
      return fail(error, "entry \"%s\" is damaged: its CRC-32 is %08x, the directory says %08x",
                  e->name, crc, e->crc32),
             NULL;
    z->checked[i] = 1;
  }
  return p;
}
