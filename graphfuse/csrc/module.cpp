// graphfuse._C / graphfuse._C_avx2: the Python module that carries the C++ CPU kernels. setup.py
// builds these sources twice on x86-64 (baseline, and -mavx2 -mfma -mf16c); its name comes from
// TORCH_EXTENSION_NAME, which torch's BuildExtension defines per extension. The kernels register
// themselves for the CPU dispatch key (TORCH_LIBRARY_IMPL in each op family's file), so only
// one of the two may be loaded (graphfuse/ops/_native.py picks); the schemas are defined once,
// in graphfuse/ops/_library.py. The module's attribute `simd` says which paths were compiled.
#include <Python.h>

#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME _C
#endif
#define GRAPHFUSE_STR_(x) #x
#define GRAPHFUSE_STR(x) GRAPHFUSE_STR_(x)
#define GRAPHFUSE_CAT_(a, b) a##b
#define GRAPHFUSE_CAT(a, b) GRAPHFUSE_CAT_(a, b)

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GRAPHFUSE_SIMD "avx2"
#else
#define GRAPHFUSE_SIMD "scalar"
#endif

static struct PyModuleDef graphfuse_module = {
    PyModuleDef_HEAD_INIT, GRAPHFUSE_STR(TORCH_EXTENSION_NAME), nullptr, -1, nullptr};

PyMODINIT_FUNC GRAPHFUSE_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  PyObject* m = PyModule_Create(&graphfuse_module);
  if (m != nullptr && PyModule_AddStringConstant(m, "simd", GRAPHFUSE_SIMD) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
