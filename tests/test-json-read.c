/* The strict JSON reader (engine/base/json-read.c): what RFC 8259 allows comes back with the right
 * values; everything else, and what Cohort cannot hold, is refused with the source, line,
 * column and what is wrong; nesting is bounded without recursion. */
#include "engine/base/json-read.h"

#include <string.h>

static JsonNode *parse(const char *text, GError **error)
{
  return cohort_json_parse_strict(text, -1, "t.json", 0, error);
}

/* The first element of a one-element array. */
static JsonNode *first(JsonNode *root)
{
  g_assert_true(JSON_NODE_HOLDS_ARRAY(root));
  return json_array_get_element(json_node_get_array(root), 0);
}

static void expect_int(const char *text, gint64 want)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = parse(text, &error);
  g_assert_no_error(error);
  JsonNode *v = first(root);
  g_assert_cmpint(json_node_get_value_type(v), ==, G_TYPE_INT64);
  g_assert_cmpint(json_node_get_int(v), ==, want);
}

static void expect_double(const char *text, double want)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = parse(text, &error);
  g_assert_no_error(error);
  JsonNode *v = first(root);
  g_assert_cmpint(json_node_get_value_type(v), ==, G_TYPE_DOUBLE);
  g_assert_cmpfloat(json_node_get_double(v), ==, want);
}

static void expect_string(const char *text, const char *want)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = parse(text, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(json_node_get_string(first(root)), ==, want);
}

static void test_valid(void)
{
  expect_int("[0]", 0);
  expect_int("[-0]", 0);
  expect_int(" [ 9223372036854775807 ] ", G_MAXINT64);
  expect_int("[-9223372036854775808]", G_MININT64);
  expect_double("[1E5]", 1e5);
  expect_double("[1e+5]", 1e5);
  expect_double("[2.5e-3]", 2.5e-3);
  expect_double("[-0.0]", -0.0);
  expect_double("[1.7976931348623157e308]", G_MAXDOUBLE);
  /* Underflow rounds to zero: a value, not an error. */
  expect_double("[1e-400]", 0.0);
  expect_string("[\"\"]", "");
  expect_string("[\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"]", "\" \\ / \b \f \n \r \t");
  expect_string("[\"\\u00e9\\u00E9\"]", "\xC3\xA9\xC3\xA9");
  expect_string("[\"\\ud83d\\ude00\"]", "\xF0\x9F\x98\x80");
  expect_string("[\"\xC3\xBC\x62\x65r \x7F\"]", "\xC3\xBC\x62\x65r \x7F");

  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) obj =
      parse("\r\n\t{\"a\": {\"a\": 1}, \"b\": [{\"a\": 2}, {\"a\": 3}], \"\": null}\n", &error);
  g_assert_no_error(error);
  JsonObject *o = json_node_get_object(obj);
  g_assert_cmpuint(json_object_get_size(o), ==, 3);
  g_assert_true(json_object_has_member(o, ""));
  g_autoptr(JsonNode) empty = parse("{}", &error);
  g_assert_no_error(error);
  g_autoptr(JsonNode) scalar = parse("true", &error);
  g_assert_no_error(error);
  g_assert_true(json_node_get_boolean(scalar));

  /* An explicit length reads only that much. */
  g_autoptr(JsonNode) prefix = cohort_json_parse_strict("[1] garbage", 3, "t", 0, &error);
  g_assert_no_error(error);
  g_assert_nonnull(prefix);
}

/* `text` is refused with `code` and a message that starts with "t.json: " and holds `what`. */
static void expect_refused(const char *text, gssize len, int code, const char *what)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, len, "t.json", 0, &error);
  g_assert_null(root);
  g_assert_error(error, COHORT_JSON_ERROR, code);
  g_test_message("%s", error->message);
  g_assert_true(g_str_has_prefix(error->message, "t.json: "));
  g_assert_null(strchr(error->message, '\n'));
  if (!strstr(error->message, what))
    g_error("\"%s\" lacks \"%s\"", error->message, what);
}

static void test_refused(void)
{
  const int SYN = COHORT_JSON_ERROR_SYNTAX;
  expect_refused("", -1, SYN, "1:1: the text ends where a value is expected");
  expect_refused("  \n ", -1, SYN, "2:2: the text ends");
  expect_refused("{\"a\": 1} {\"b\": 2}", -1, SYN, "1:10: '{' after the end of the value");
  expect_refused("[1] x", -1, SYN, "1:5: 'x' after the end");
  expect_refused("[\"ws\\u0000/etc\"]", -1, SYN, "1:5: \\u0000 (a NUL character)");
  expect_refused("[1 /* c */]", -1, SYN, "1:4: '/' where ',' or ']' is expected");
  expect_refused("[/* c */ 1]", -1, SYN, "1:2: comments are not allowed");
  expect_refused("{// c\n\"a\": 1}", -1, SYN, "1:2: comments are not allowed");
  expect_refused("['a']", -1, SYN, "1:2: strings must be in double quotes");
  expect_refused("{'a': 1}", -1, SYN, "keys must be in double quotes");
  expect_refused("{a: 1}", -1, SYN, "1:2: 'a' where a key in double quotes is expected");
  expect_refused("[01]", -1, SYN, "1:2: a number with a leading zero");
  expect_refused("[-01]", -1, SYN, "1:2: a number with a leading zero");
  expect_refused("[0x10]", -1, SYN, "1:2: hexadecimal numbers are not allowed");
  expect_refused("[+1]", -1, SYN, "a number cannot start with '+'");
  expect_refused("[.5]", -1, SYN, "a number needs a digit before the decimal point");
  expect_refused("[1.]", -1, SYN, "1:4: a digit must follow the decimal point, not ']'");
  expect_refused("[1e]", -1, SYN, "a digit must follow the exponent's 'e'");
  expect_refused("[-]", -1, SYN, "a digit must follow '-'");
  expect_refused("[NaN]", -1, SYN, "NaN and Infinity are not JSON numbers");
  expect_refused("[-Infinity]", -1, SYN, "NaN and Infinity");
  expect_refused("[nan]", -1, SYN, "NaN and Infinity");
  expect_refused("[9223372036854775808]", -1, SYN, "\"9223372036854775808\" is outside the 64");
  expect_refused("[-9223372036854775809]", -1, SYN, "outside the 64-bit range");
  expect_refused("[1e309]", -1, SYN, "\"1e309\" is too large");
  expect_refused("\xEF\xBB\xBF[1]", -1, SYN, "1:1: a byte order mark (BOM)");
  expect_refused("[\"a\nb\"]", -1, SYN, "1:4: a raw control character (byte 0x0A)");
  expect_refused("[\"a\x01\"]", -1, SYN, "byte 0x01");
  expect_refused("[1\x01]", -1, SYN, "1:3: byte 0x01 where ',' or ']'");
  expect_refused("[\"\xFF\"]", -1, SYN, "1:3: byte 0xFF is not UTF-8");
  expect_refused("[\"\xC0\xAF\"]", -1, SYN, "is not UTF-8");     /* overlong '/' */
  expect_refused("[\"\xED\xA0\x80\"]", -1, SYN, "is not UTF-8"); /* a surrogate as UTF-8 */
  expect_refused("[1]\0[2]", 7, SYN, "1:4: a NUL byte is not allowed");
  expect_refused("[\"\\ud800\"]", -1, SYN, "\\uD800 is a high surrogate without the low");
  expect_refused("[\"\\ud800\\u0041\"]", -1, SYN, "high surrogate without");
  expect_refused("[\"\\udc00\"]", -1, SYN, "\\uDC00 is a lone low surrogate");
  expect_refused("[\"\\u12\"]", -1, SYN, "\\u must be followed by four hex digits");
  expect_refused("[\"\\x41\"]", -1, SYN, "unknown escape \\ followed by 'x'");
  expect_refused("[\"abc", -1, SYN, "1:2: this string is never closed");
  expect_refused("[1,]", -1, SYN, "1:3: a comma before ']' is not allowed");
  expect_refused("{\"a\": 1,}", -1, SYN, "a comma before '}'");
  expect_refused("[1 2]", -1, SYN, "1:4: '2' where ',' or ']' is expected");
  expect_refused("{\"a\" 1}", -1, SYN, "'1' where ':' after the key is expected");
  expect_refused("[tru]", -1, SYN, "'t' where a value");
  expect_refused("[True]", -1, SYN, "'T' where a value");
  expect_refused("[1", -1, SYN, "the end of the text where ',' or ']' is expected");
  expect_refused("{\"a\": 1", -1, SYN, "the end of the text where ',' or '}'");
  /* Columns count characters, not bytes. */
  expect_refused("{\"\xC3\xBC\": 1,\n \"\xE2\x82\xAC\": 2, x}", -1, SYN, "2:10: 'x' where a key");
  expect_refused("[\"\xC3\xBC\", \xC3\xA4]", -1, SYN, "1:7: '\xC3\xA4' where a value");

  const int DUP = COHORT_JSON_ERROR_DUPLICATE_KEY;
  expect_refused("{\"a\": 1, \"b\": 2, \"a\": 3}", -1, DUP,
                 "key \"a\" is given more than once (at 1:18); allowed: each key once");
  expect_refused("{\"a\": 1, \"\\u0061\": 2}", -1, DUP, "key \"a\" is given more than once");
  expect_refused("[{\"x\": {\"k\": 1,\n\"k\": 2}}]", -1, DUP,
                 "key \"k\" is given more than once (at 2:1)");
  /* A key with a newline or a megabyte of text still makes a short one-line message. */
  expect_refused("{\"a\\nb\": 1, \"a\\nb\": 2}", -1, DUP, "key \"a\\nb\" is given");
  g_autoptr(GString) long_key = g_string_new("{\"");
  for (int i = 0; i < 100000; i++)
    g_string_append_c(long_key, 'k');
  g_autofree char *k = g_strdup(long_key->str + 1);
  g_string_append_printf(long_key, "\": 1, %s\": 2}", k);
  g_autoptr(GError) error = NULL;
  g_assert_null(parse(long_key->str, &error));
  g_assert_error(error, COHORT_JSON_ERROR, DUP);
  g_assert_cmpuint(strlen(error->message), <, 200);
}

/* Objects and arrays in turn, `depth` levels: {"k": [{"k": [ ... 1 ... ]}]}. */
static GString *nested(guint depth)
{
  GString *s = g_string_new(NULL);
  for (guint i = 0; i < depth; i++)
    g_string_append(s, i % 2 ? "[" : "{\"k\": ");
  g_string_append_c(s, '1');
  for (guint i = depth; i > 0; i--)
    g_string_append_c(s, (i - 1) % 2 ? ']' : '}');
  return s;
}

/* Depth: 64 levels read, 65 refused; the 60,000-deep array is refused quickly and
 * without recursion; a caller's own limit is kept. */
static void test_depth(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) ok = g_string_new(NULL);
  for (int i = 0; i < 64; i++)
    g_string_append_c(ok, '[');
  for (int i = 0; i < 64; i++)
    g_string_append_c(ok, ']');
  g_autoptr(JsonNode) deep = parse(ok->str, &error);
  g_assert_no_error(error);
  g_string_prepend_c(ok, '[');
  g_string_append_c(ok, ']');
  expect_refused(ok->str, -1, COHORT_JSON_ERROR_DEPTH,
                 "1:65: arrays and objects nested deeper than 64 levels; allowed: at most 64");

  g_autoptr(GString) huge = g_string_new("{\"device_indexes\": ");
  for (int i = 0; i < 60000; i++)
    g_string_append_c(huge, '[');
  for (int i = 0; i < 60000; i++)
    g_string_append_c(huge, ']');
  g_string_append_c(huge, '}');
  expect_refused(huge->str, -1, COHORT_JSON_ERROR_DEPTH, "1:83: arrays and objects nested");
  /* Unclosed, as a truncated file would be. */
  expect_refused(huge->str, 40000, COHORT_JSON_ERROR_DEPTH, "deeper than 64");

  g_autoptr(GString) objs = nested(64);
  g_autoptr(JsonNode) mixed = parse(objs->str, &error);
  g_assert_no_error(error);
  g_string_free(objs, TRUE);
  objs = nested(65);
  expect_refused(objs->str, -1, COHORT_JSON_ERROR_DEPTH, "deeper than 64");

  g_autoptr(JsonNode) two = cohort_json_parse_strict("[[1]]", -1, "t", 2, &error);
  g_assert_no_error(error);
  g_assert_null(cohort_json_parse_strict("[[[1]]]", -1, "t", 2, &error));
  g_assert_error(error, COHORT_JSON_ERROR, COHORT_JSON_ERROR_DEPTH);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/json-read/valid", test_valid);
  g_test_add_func("/json-read/refused", test_refused);
  g_test_add_func("/json-read/depth", test_depth);
  return g_test_run();
}
