#include <ATen/ATen.h>
#include <torch/library.h>
#include <Python.h>
at::Tensor probe_fail(const at::Tensor& x, int64_t n) {
  TORCH_CHECK(n > 0, "probe: n must be positive, got ", n, " for shape ", x.sizes());
  return x + n;
}
TORCH_LIBRARY(probe, m) { m.def("fail(Tensor x, int n) -> Tensor"); }
TORCH_LIBRARY_IMPL(probe, CPU, m) { m.impl("fail", &probe_fail); }
extern "C" PyObject* PyInit_probe_ext(void) {
  static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "probe_ext", "", -1, nullptr};
  return PyModule_Create(&d);
}
