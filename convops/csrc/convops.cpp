// The convops._C Python module. It carries no Python functions: importing it runs the static TORCH_LIBRARY
// registrations of every op in this library (the pattern of pytorch/extension-cpp), which is all Python needs.
#include <Python.h>

extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "convops compiled ops", -1, nullptr};
  return PyModule_Create(&module_def);
}
}
