// graphfuse._C: the Python module that carries the C++ CPU kernels. The kernels register
// themselves for the CPU dispatch key (TORCH_LIBRARY_IMPL in each op family's file); the
// schemas are defined once, in graphfuse/ops/_library.py.
#include <Python.h>

static struct PyModuleDef graphfuse_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&graphfuse_module); }
