/* The registry holds exactly the declared families (engine/config/model-families.h), in their
 * order, each class named as declared, and finds each by the `model` key's value. */
#include "engine/config/model-families.h"
#include "engine/models/registry.h"

static void test_classes_are_the_families(void)
{
  guint n;
  const CohortFamily *families = cohort_families(&n);
  const CohortModelClass *const *classes = cohort_model_classes();
  guint i = 0;
  for (; classes[i] != NULL; i++) {
    g_assert_cmpuint(i, <, n);
    g_assert_cmpstr(classes[i]->name, ==, families[i].name);
    g_assert_true(cohort_model_class_find(families[i].name) == classes[i]);
  }
  g_assert_cmpuint(i, ==, n);
  g_assert_null(cohort_model_class_find("vae"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/registry/classes-are-the-families", test_classes_are_the_families);
  return g_test_run();
}
