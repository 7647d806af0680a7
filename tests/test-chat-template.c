/* The chat-template renderer on its own (no npm needed): the constructs chat templates use,
 * Python's meanings where the JavaScript reference differs (docs/data.md), refusals that name
 * the construct and the line, and the limits that stop hostile templates. */
#include <string.h>

#include "data/chat-template.h"

/* Renders `tmpl` with the variables of the JSON object `vars`. */
static char *render(const char *tmpl, const char *vars, GError **error)
{
  g_autoptr(CohortChatTemplate) t = cohort_chat_template_new(tmpl, "test", error);
  if (!t)
    return NULL;
  g_autoptr(JsonParser) p = json_parser_new();
  g_assert_true(json_parser_load_from_data(p, vars, -1, NULL));
  return cohort_chat_template_render(t, json_node_get_object(json_parser_get_root(p)), "<s>",
                                     "</s>", FALSE, "conversation 1", error);
}

static void check(const char *tmpl, const char *vars, const char *want)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *got = render(tmpl, vars, &error);
  g_assert_no_error(error);
  if (strcmp(got, want) != 0)
    g_error("template %s\nrendered \"%s\"\nwanted   \"%s\"", tmpl, got, want);
}

static void refused(const char *tmpl, const char *vars, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *got = render(tmpl, vars, &error);
  g_assert_null(got);
  g_assert_nonnull(error);
  if (!strstr(error->message, needle))
    g_error("template %s: the message \"%s\" lacks \"%s\"", tmpl, error->message, needle);
}

static void test_constructs(void)
{
  const char *m = "{\"messages\": [{\"role\": \"system\", \"content\": \" Be kind. \"}, "
                  "{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
                  "\"content\": \"Hello!\"}]}";
  check("{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}"
        "{% if not loop.last %},{% endif %}{% endfor %}",
        m, "1/3:system,2/3:user,3/3:assistant");
  check("{{ messages[0]['content'] | trim }}|{{ messages | length - 1 }}", m, "Be kind.|2");
  check("{% set ns = namespace(n=0) %}{% for m in messages if m.role != 'system' %}"
        "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        m, "2");
  check("{% set x = 1 %}{% for m in messages %}{% set x = 2 %}{% endfor %}{{ x }}", m, "1");
  check(
      "{%- macro say(t, p='> ') -%}{{ p ~ t }}{%- endmacro -%}{{ say('a') }} {{ say('b', '# ') }}",
      m, "> a # b");
  check("{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}", m, "aus");
  check("{{ 'a,b,,c'.split(',') }} {{ ' x  y '.split() }} {{ 'x'.startswith(('a', 'x')) }}", m,
        "['a', 'b', '', 'c'] ['x', 'y'] True");
  check("{{ messages[1] | tojson }}", m, "{\"role\": \"user\", \"content\": \"Hi\"}");
  check("{{ {'a': [1, 2.5, none, true]} | tojson(indent=2) }}", m,
        "{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
  check("{{ x is defined }}{{ messages is string }}{{ 'a' is string }}{{ none is none }}", m,
        "FalseFalseTrueTrue");
  check("{% if messages[0].role == 'system' %}S{% elif x %}X{% else %}E{% endif %}", m, "S");
  check("{{ bos_token }}{{ 7 // 2 }}{{ -7 // 2 }}{{ 7 % 3 }}{{ 1 / 2 }}{{ 2 ** 3 }}", m,
        "<s>3-410.58");
  check("{{ 'x' if false }}|{{ 'a' if 1 > 2 else 'b' }}|{{ [1, 2] + [3] }}", m, "|b|[1, 2, 3]");
  check("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", m, "a=1;b=2;");
  check("{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}", m,
        "02");
  check("{% for i in range(9) %}{{ i }}{% if i == 2 %}{% break %}{% endif %}{% endfor %}", m,
        "012");
  check("{% for x in [] %}x{% else %}empty{% endfor %}", m, "empty");
  check("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | "
        "join(', ') }}",
        m, "Hi");
  check("{% set t %}in {{ 1 + 1 }}{% endset %}[{{ t }}]", m, "[in 2]");
  check("{{ '</think>' in 'a</think>b' }}{{ 'z' not in ['a'] }}", m, "TrueTrue");
  check("{# a comment #}a  {#- stripped -#}  b", m, "ab");
}

/* trim_blocks and lstrip_blocks, as transformers renders: a block tag's line leaves no
 * indentation and no newline. */
static void test_whitespace(void)
{
  const char *v = "{\"messages\": []}";
  check("a\n  {% if true %}\n    b\n  {% endif %}\nc\n", v, "a\n    b\nc");
  check("a  {{- ' b ' -}}  c", v, "a b c");
  check("{%- if true -%}\n\n  x  \n\n{%- endif -%}", v, "x");
  check("x {% generation %}y{% endgeneration %} z", v, "x y z");
}

/* Where @huggingface/jinja and Jinja2 disagree, Cohort renders as Jinja2 (transformers). */
static void test_python_meanings(void)
{
  const char *v = "{\"c\": \"  \\nabc\\n  \", \"n\": null, \"t\": true}";
  check("[{{ c.strip('\\n') }}]", v, "[  \nabc\n  ]");
  check("[{{ c.strip() }}]", v, "[abc]");
  check("{{ n }} {{ t }} {{ 1.0 }} {{ [1, 'a'] }}", v, "None True 1.0 [1, 'a']");
  refused("{{ 'a' + 1 }}", v, "line 1: '+' is not defined between a string and a int");
  refused("{{ nothing.attr }}", v, "'nothing' is undefined");
}

static void test_refusals(void)
{
  const char *v = "{\"messages\": []}";
  refused("ok\n{% include 'x.html' %}", v, "line 2: the statement {% include %} is not one");
  refused("{{ x | wordwrap(3) }}", v, "line 1: the filter \"wordwrap\" is not one");
  refused("a\n\n{{ x is sameish }}", v, "line 3: the test \"sameish\"");
  refused("{% if x %}open", v, "the template ends before {% endif %}");
  refused("{% for x in y recursive %}{% endfor %}", v, "recursive is not supported");
  refused("{{ raise_exception('Roles must alternate') }}", v,
          "raise_exception): Roles must alternate");
  refused("{{ 'unclosed }}", v, "a string is not closed");
  refused("{{ a @ b }}", v, "the character '@' has no meaning in a tag");
  refused("{% endfor %}", v, "{% endfor %} is not where it belongs");
}

/* Hostile templates end in an error, never in a hang or a crash. */
static void test_limits(void)
{
  const char *v = "{\"messages\": []}";
  /* The step limit or the memory limit, whichever comes first. */
  refused("{% for a in range(1000000) %}{% for b in range(1000000) %}x{% endfor %}{% endfor %}", v,
          "line 1: the render");
  refused("{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}", v,
          "steps");
  refused("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", v, "deeper than");
  g_autoptr(GString) deep = g_string_new("{{ ");
  for (int i = 0; i < 200; i++)
    g_string_append_c(deep, '(');
  g_string_append_c(deep, '1');
  for (int i = 0; i < 200; i++)
    g_string_append_c(deep, ')');
  g_string_append(deep, " }}");
  refused(deep->str, v, "nested deeper than");
  refused("{{ 'ab' * 100000000 }}", v, "grows past");
  refused("{% set s = 'x' %}{% for i in range(60) %}{% set s = s + s %}{% endfor %}{{ s }}", v,
          "grows past");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/chat-template/constructs", test_constructs);
  g_test_add_func("/chat-template/whitespace", test_whitespace);
  g_test_add_func("/chat-template/python", test_python_meanings);
  g_test_add_func("/chat-template/refusals", test_refusals);
  g_test_add_func("/chat-template/limits", test_limits);
  return g_test_run();
}
