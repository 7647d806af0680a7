/* test-tokenizer-hf's chat templates (included by it): each template renders CONVERSATIONS
 * conversations with and without the generation prompt through `cohort-tokenize
 * --render-chat`, and @huggingface/jinja renders the same. */
#pragma once

typedef struct {
  const char *name;
  char *dir;  /* a tokenizer folder whose tokenizer_config.json holds the template */
  char *file; /* the template alone, for the reference */
  const char *bos, *eos;
  gboolean rich, system;
} Chat;

static void setup_chat(Fixture *f, gconstpointer data)
{
  (void)data;
  f->modules = reference_modules();
  if (f->modules)
    f->dir = tu_mkdtemp("cohort-tokenizer-hf-chat");
}

/* A folder for a template that has no package: Llama 2's tokenizer.json beside a
 * tokenizer_config.json holding the template. */
static char *template_dir(Fixture *f, const char *name, const char *bos, const char *eos,
                          char **file)
{
  g_autofree char *fixture_name = g_strdup_printf("%s.jinja", name);
  *file = g_test_build_filename(G_TEST_DIST, "fixtures", "chat", fixture_name, NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(*file, &text, NULL, NULL));
  char *dir = g_build_filename(f->dir, name, NULL);
  g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
  g_autofree char *llama2 = tokenizer_dir(f, "llama2");
  g_autofree char *from = g_build_filename(llama2, "tokenizer.json", NULL);
  g_autofree char *to = g_build_filename(dir, "tokenizer.json", NULL);
  g_assert_cmpint(symlink(from, to), ==, 0);
  g_autoptr(JsonBuilder) b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "bos_token");
  json_builder_add_string_value(b, bos);
  json_builder_set_member_name(b, "eos_token");
  json_builder_add_string_value(b, eos);
  json_builder_set_member_name(b, "chat_template");
  json_builder_add_string_value(b, text);
  json_builder_end_object(b);
  g_autoptr(JsonNode) root = json_builder_get_root(b);
  g_autoptr(JsonGenerator) gen = json_generator_new();
  json_generator_set_root(gen, root);
  g_autofree char *config = g_build_filename(dir, "tokenizer_config.json", NULL);
  g_assert_true(json_generator_to_file(gen, config, NULL));
  return dir;
}

/* A package's template, written alone for the reference. */
static char *package_template(Fixture *f, const char *name, char **dir)
{
  *dir = tokenizer_dir(f, name);
  g_autofree char *config = g_build_filename(*dir, "tokenizer_config.json", NULL);
  g_autoptr(JsonParser) p = json_parser_new();
  g_assert_true(json_parser_load_from_file(p, config, NULL));
  const char *text =
      json_object_get_string_member(json_node_get_object(json_parser_get_root(p)), "chat_template");
  g_autofree char *base = g_strdup_printf("%s.jinja", name);
  char *file = g_build_filename(f->dir, base, NULL);
  g_assert_true(g_file_set_contents(file, text, -1, NULL));
  return file;
}

/* cohort-tokenize --render-chat: the rendered conversations. */
static GPtrArray *cohort_renders(const Chat *c, const char *convs, gboolean gen)
{
  const char *argv[] = {
      g_getenv("COHORT_TOKENIZE"),        "--tokenizer", c->dir, "--render-chat", convs,
      gen ? "--generation-prompt" : NULL, NULL};
  g_autofree char *out = run(argv);
  g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
  GPtrArray *renders = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; lines[i] && *lines[i]; i++) {
    g_autoptr(JsonParser) p = json_parser_new();
    g_assert_true(json_parser_load_from_data(p, lines[i], -1, NULL));
    g_ptr_array_add(renders, g_strdup(json_node_get_string(json_parser_get_root(p))));
  }
  return renders;
}

static void test_chat(Fixture *f, gconstpointer data)
{
  (void)data;
  if (!f->modules)
    return;
  Chat chats[] = {
      {"qwen3", NULL, NULL, NULL, "<|im_end|>", TRUE, TRUE},
      {"llama3", NULL, NULL, "<|begin_of_text|>", "<|end_of_text|>", FALSE, TRUE},
      {"smollm2", NULL, NULL, "<|im_start|>", "<|im_end|>", FALSE, TRUE},
      {"mistral", NULL, NULL, "<s>", "</s>", FALSE, TRUE},
  };
  g_autoptr(JsonBuilder) job = json_builder_new();
  json_builder_begin_object(job);
  json_builder_set_member_name(job, "chat");
  json_builder_begin_array(job);
  g_autoptr(GString) line = g_string_new(NULL);
  for (guint c = 0; c < G_N_ELEMENTS(chats); c++) {
    Chat *ch = &chats[c];
    if (c < 2)
      ch->file = package_template(f, ch->name, &ch->dir);
    else
      ch->dir = template_dir(f, ch->name, ch->bos, ch->eos, &ch->file);
    g_autoptr(GString) all = g_string_new(NULL);
    for (guint i = 0; i < CONVERSATIONS; i++) {
      hf_conversation(i, ch->rich, line);
      g_string_append_printf(all, "%s\n", line->str);
    }
    g_autofree char *base = g_strdup_printf("%s.jsonl", ch->name);
    g_autofree char *convs = g_build_filename(f->dir, base, NULL);
    g_assert_true(g_file_set_contents(convs, all->str, (gssize)all->len, NULL));
    for (int gen = 0; gen < 2; gen++) {
      json_builder_begin_object(job);
      json_builder_set_member_name(job, "template");
      json_builder_add_string_value(job, ch->file);
      json_builder_set_member_name(job, "conversations");
      json_builder_add_string_value(job, convs);
      json_builder_set_member_name(job, "generation_prompt");
      json_builder_add_boolean_value(job, gen);
      json_builder_set_member_name(job, "bos_token");
      if (ch->bos)
        json_builder_add_string_value(job, ch->bos);
      else
        json_builder_add_null_value(job);
      json_builder_set_member_name(job, "eos_token");
      json_builder_add_string_value(job, ch->eos);
      json_builder_end_object(job);
    }
  }
  json_builder_end_array(job);
  json_builder_end_object(job);
  g_autoptr(JsonNode) ref = reference(f, job);
  JsonArray *results = json_object_get_array_member(json_node_get_object(ref), "chat");
  for (guint c = 0; c < G_N_ELEMENTS(chats); c++) {
    Chat *ch = &chats[c];
    g_autofree char *base = g_strdup_printf("%s.jsonl", ch->name);
    g_autofree char *convs = g_build_filename(f->dir, base, NULL);
    for (int gen = 0; gen < 2; gen++) {
      JsonArray *want = json_array_get_array_element(results, c * 2 + gen);
      g_autoptr(GPtrArray) mine = cohort_renders(ch, convs, gen);
      g_assert_cmpuint(mine->len, ==, json_array_get_length(want));
      for (guint i = 0; i < mine->len; i++) {
        JsonNode *w = json_array_get_element(want, i);
        if (!JSON_NODE_HOLDS_VALUE(w))
          g_error("%s: conversation %u: the reference failed", ch->name, i + 1);
        if (strcmp(mine->pdata[i], json_node_get_string(w)) != 0)
          g_error("%s%s: conversation %u renders differently:\n--- Cohort\n%s\n--- reference\n%s",
                  ch->name, gen ? " (generation prompt)" : "", i + 1, (const char *)mine->pdata[i],
                  json_node_get_string(w));
      }
      g_test_message("%s%s: %u conversations rendered identically", ch->name,
                     gen ? " with the generation prompt" : "", mine->len);
    }
    g_free(ch->file);
    g_free(ch->dir);
  }
}
