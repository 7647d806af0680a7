/* `cohort`: the window that edits, launches and watches training runs. */
#include "ui/app.h"

int main(int argc, char **argv)
{
  cohort_app_init_i18n();
  g_autoptr(GtkApplication) app = cohort_app_new();
  return g_application_run(G_APPLICATION(app), argc, argv);
}
