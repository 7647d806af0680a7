/* fuzz-tokenizer-hf's chat templates (included by it): real-shaped templates changed at
 * random, and hostile ones. Each either renders a small conversation or fails with one line
 * naming the template; none crashes or hangs. */
#pragma once

static const char conversation[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
    "\"content\": \"Hi <think>\\nthere</think>\"}, {\"role\": \"assistant\", \"content\": "
    "\"<think>\\nhm\\n</think>\\n\\nHello!\"}], \"tools\": [{\"name\": \"f\"}]}";

static const char qwen_like[] =
    "{%- set ns = namespace(last=messages|length - 1) -%}\n"
    "{%- macro wrap(role, text) -%}<|im_start|>{{ role }}\n{{ text | trim }}<|im_end|>\n"
    "{%- endmacro -%}\n"
    "{%- for m in messages[::-1] if m.role == 'user' -%}{%- if loop.first -%}"
    "{%- set ns.last = messages|length - loop.index -%}{%- endif -%}{%- endfor -%}\n"
    "{%- for m in messages -%}\n"
    "  {%- if '</think>' in m.content and m.role == 'assistant' -%}\n"
    "    {{- wrap(m.role, m.content.split('</think>')[-1].lstrip('\\n')) }}\n"
    "  {%- elif m.role in ['user', 'system'] -%}{{- wrap(m.role, m.content) }}\n"
    "  {%- else -%}{{ raise_exception('role ' ~ m.role) }}{%- endif -%}\n"
    "{%- endfor -%}{%- if tools is defined and tools -%}{{ tools | tojson(indent=2) }}"
    "{%- endif -%}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}";

static void template_case(Ctx *c, const char *text, gsize len, FuzzExpect expect,
                          const char *needle)
{
  g_autofree char *path = fuzz_case_path(&c->t, "template.jinja");
  fuzz_write(path, text, len);
  fuzz_set_current(path);
  c->t.cases++;
  g_autofree char *copy = g_strndup(text, len);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortChatTemplate) t = cohort_chat_template_new(copy, path, &error);
  g_autofree char *out = NULL;
  if (t) {
    g_autoptr(JsonParser) p = json_parser_new();
    g_assert_true(json_parser_load_from_data(p, conversation, -1, NULL));
    out = cohort_chat_template_render(t, json_node_get_object(json_parser_get_root(p)), "<s>",
                                      "</s>", TRUE, "the conversation", &error);
  }
  fuzz_set_current("");
  if (out) {
    c->t.accepted++;
    if (expect == FUZZ_REFUSE)
      fuzz_fail(&c->t, path, "wrong accept: this template must fail");
    return;
  }
  c->t.refused++;
  const char *problem = error ? fuzz_message_problem(error->message, path) : "no error";
  if (!problem && needle && !strstr(error->message, needle))
    problem = "the message does not say what is wrong";
  if (!problem && expect == FUZZ_ACCEPT)
    problem = "refused a template that renders";
  if (problem)
    fuzz_fail(&c->t, path, "%s (want \"%s\"): %s", problem, needle ? needle : "",
              error ? error->message : "");
}

static void chat_templates(Ctx *c)
{
  template_case(c, qwen_like, strlen(qwen_like), FUZZ_ACCEPT, NULL);
  const char *names[] = {"smollm2.jinja", "mistral.jinja"};
  GPtrArray *bases = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(bases, g_strdup(qwen_like));
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autofree char *p = g_test_build_filename(G_TEST_DIST, "fixtures", "chat", names[i], NULL);
    char *text = NULL;
    g_assert_true(g_file_get_contents(p, &text, NULL, NULL));
    g_ptr_array_add(bases, text);
  }
  /* Changed at random: bytes flipped, cut short, a piece repeated. */
  for (guint i = 0; i < 150; i++) {
    const char *base = bases->pdata[fuzz_below(&c->rng, bases->len)];
    gsize len = strlen(base);
    g_autoptr(GString) s = g_string_new(base);
    switch (fuzz_below(&c->rng, 3)) {
    case 0:
      for (guint k = 0, n = 1 + fuzz_below(&c->rng, 4); k < n; k++)
        s->str[fuzz_below(&c->rng, len)] = "{}%#-|()[]'\"x \n."[fuzz_below(&c->rng, 16)];
      break;
    case 1:
      g_string_truncate(s, fuzz_below(&c->rng, len));
      break;
    default: {
      gsize a = fuzz_below(&c->rng, len), b = a + fuzz_below(&c->rng, MIN(len - a, 40) + 1);
      g_autofree char *piece = g_strndup(base + a, b - a);
      for (guint k = 0, n = 1 + fuzz_below(&c->rng, 30); k < n; k++)
        g_string_insert(s, (gssize)a, piece);
    }
    }
    template_case(c, s->str, s->len, FUZZ_EITHER, NULL);
  }
  g_ptr_array_unref(bases);
  /* Hostile on purpose. */
  g_autoptr(GString) deep = g_string_new(NULL);
  for (int i = 0; i < 200; i++)
    g_string_append(deep, "{% if true %}");
  template_case(c, deep->str, deep->len, FUZZ_REFUSE, "deeper than");
  struct {
    const char *text, *needle;
  } bad[] = {
      {"{% for i in range(100000000) %}{% endfor %}", "range() makes more"},
      {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "deeper than"},
      {"{% set s = 'ab' %}{% for i in range(40) %}{% set s = s ~ s %}{% endfor %}", "MiB"},
      {"{{ messages[0].content * 1000000000 }}", "grows past"},
      {"{% set r = range(10000) %}{% for a in r %}{% for b in r %}{{ a }}{% endfor %}{% endfor %}",
       "the render"},
      {"{{ x.y.z }}", "'x' is undefined"},
      {"{% include 'other' %}", "{% include %}"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++)
    template_case(c, bad[i].text, strlen(bad[i].text), FUZZ_REFUSE, bad[i].needle);
}
