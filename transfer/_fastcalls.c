/* The hot frames of transfer's call wrappers (transfer/patches/_calls.py) in C.
 *
 * One object type, FastCall, stands in for one Python wrapper (its "twin": the
 * closure `device_first` or `device_keyword` built). It answers the cases the
 * twin's hot frame answers without translating anything new (no device in the
 * arguments; the identity memo of the last device argument; a translation
 * already cached) and hands every other call, unchanged, to the twin, which
 * does what it always did (translation misses, errors, reports). The memos are
 * the twin's own closure cells, read here with PyCell_Get, so the twin's slow
 * path updates what this frame reads: one state, two readers.
 *
 * Built against the limited API of Python 3.8 (one abi3 build for 3.8-3.12),
 * plus what the 3.8 limited headers do not declare but CPython has:
 * - PyCell_Get (exported by every CPython 3.x; not in python3.dll, so no
 *   Windows build: the install then goes on without the extension);
 * - the type flag Py_TPFLAGS_METHOD_DESCRIPTOR (PEP 590, 3.8+: `x.to(...)`
 *   calls the wrapper with `x` first, binding no method object, as for a
 *   Python function);
 * - vectorcall on 3.9+ (detected when the module loads: the
 *   __vectorcalloffset__ member and the type flag, PyObject_Vectorcall or
 *   PyObject_VectorcallDict found with dlsym), so a call builds no tuple.
 */
#define Py_LIMITED_API 0x03080000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#ifndef _WIN32
#include <dlfcn.h>
#endif

#ifndef Py_TPFLAGS_METHOD_DESCRIPTOR
#define Py_TPFLAGS_METHOD_DESCRIPTOR (1UL << 17)
#endif

PyAPI_FUNC(PyObject *) PyCell_Get(PyObject *);

/* PEP 590 vectorcall, used where the running Python has it in the stable form (3.9+; the
 * limited API names it from 3.12 only): the type's vectorcall slot is set, through
 * __vectorcalloffset__, only then, and PyObject_Vectorcall is looked up when the module loads.
 * On 3.8 every call goes through tp_call (one argument tuple). */
typedef PyObject *(*vectorcall_t)(PyObject *, PyObject *const *, size_t, PyObject *);
#define VC_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))
#define VC_NARGS(n) ((Py_ssize_t)((n) & ~VC_OFFSET))
#define HAVE_VECTORCALL_FLAG (1UL << 11)
typedef PyObject *(*vectorcall_dict_t)(PyObject *, PyObject *const *, size_t, PyObject *);
static vectorcall_t object_vectorcall;  /* PyObject_Vectorcall (exported from 3.11), or NULL */
static vectorcall_dict_t object_vectorcall_dict;  /* PyObject_VectorcallDict (3.9, 3.10), or NULL */
static int use_vectorcall;

/* PyObject_Vectorcall; on 3.9-3.10 (where it is an inline function) through PyObject_VectorcallDict. */
static PyObject *
vcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t i, n, nkw;
    PyObject *kwargs, *result;
    if (object_vectorcall != NULL)
        return object_vectorcall(callable, args, nargsf, kwnames);
    if (kwnames == NULL || (nkw = PyTuple_Size(kwnames)) == 0)
        return object_vectorcall_dict(callable, args, nargsf, NULL);
    n = (Py_ssize_t)(nargsf & ~((size_t)1 << (8 * sizeof(size_t) - 1)));
    kwargs = PyDict_New();
    if (kwargs == NULL)
        return NULL;
    for (i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kwargs, PyTuple_GetItem(kwnames, i), args[n + i]) < 0) {
            Py_DECREF(kwargs);
            return NULL;
        }
    }
    result = object_vectorcall_dict(callable, args, nargsf, kwargs);
    Py_DECREF(kwargs);
    return result;
}

enum { K_TO = 0, K_TO_COPY = 1, K_FACTORY = 2, K_DRAWING = 3, K_METHOD = 4, K_NOARGS = 5, K_LAST = 5 };

typedef struct {
    PyObject_HEAD
    int kind;
    int to_signature;   /* K_TO: original takes (device, dtype, non_blocking, ...) */
    int undirected;     /* K_DRAWING: the twin runs a check before calls with no device */
    PyObject *twin;     /* the Python wrapper: every call this frame does not answer */
    PyObject *original;
    PyObject *last;     /* cell: (argument, translation[, moved | generator]) */
    PyObject *plain;    /* cell (K_TO, K_TO_COPY): the last first argument naming no device */
    PyObject *cache;    /* dict (K_FACTORY): the translator's cache */
    PyObject *spec_types; /* frozenset (K_FACTORY) */
    PyObject *current;  /* K_DRAWING: the callable standing for "the current device's generator" */
    PyObject *dict;     /* attributes: __name__, __wrapped__, ... */
    vectorcall_t vectorcall;
} FastCall;

static PyObject *s_device, *s_generator, *s_non_blocking, *s_qualname, *method_type, *device_generator;

static int
has_kwargs(PyObject *kwargs)
{
    return kwargs != NULL && PyDict_Size(kwargs) != 0;
}

static PyObject *
call_pack(PyObject *original, PyObject *tuple)
{
    PyObject *result;
    if (tuple == NULL)
        return NULL;
    result = PyObject_Call(original, tuple, NULL);
    Py_DECREF(tuple);
    return result;
}

/* device_first's `to` (and _copying_to's): self and first are args[0], args[1]. */
static PyObject *
call_to(FastCall *fc, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_Size(args);
    if (n >= 2) {
        PyObject *self = PyTuple_GetItem(args, 0), *first = PyTuple_GetItem(args, 1);
        PyObject *plain = PyCell_Get(fc->plain);
        int is_plain = first == plain;
        Py_XDECREF(plain);
        if (is_plain) {
            if (!has_kwargs(kwargs) && (n == 2 || n == 4))
                return PyObject_Call(fc->original, args, NULL);
        }
        else if (n == 2) {
            PyObject *seen = PyCell_Get(fc->last), *result = NULL;
            int answered = 0;
            if (seen != NULL && PyTuple_Check(seen) && PyTuple_Size(seen) >= 2
                    && first == PyTuple_GetItem(seen, 0)) {
                PyObject *translation = PyTuple_GetItem(seen, 1);
                if (fc->kind == K_TO) {
                    if (!has_kwargs(kwargs)) {
                        answered = 1;
                        result = call_pack(fc->original, PyTuple_Pack(2, self, translation));
                    }
                    else if (fc->to_signature && PyDict_Size(kwargs) == 1) {
                        PyObject *nb = PyDict_GetItem(kwargs, s_non_blocking);
                        if (nb != NULL) {
                            answered = 1;
                            result = call_pack(fc->original, PyTuple_Pack(4, self, translation, Py_None, nb));
                        }
                    }
                }
                else if (PyTuple_Size(seen) >= 3) {
                    int moved = PyObject_IsTrue(PyTuple_GetItem(seen, 2));
                    if (moved < 0) {
                        Py_DECREF(seen);
                        return NULL;
                    }
                    if (moved) {
                        if (!has_kwargs(kwargs)) {
                            answered = 1;
                            result = call_pack(fc->original,
                                               PyTuple_Pack(5, self, translation, Py_None, Py_False, Py_True));
                        }
                        else if (PyDict_Size(kwargs) == 1) {
                            PyObject *nb = PyDict_GetItem(kwargs, s_non_blocking);
                            if (nb != NULL) {
                                answered = 1;
                                result = call_pack(fc->original,
                                                   PyTuple_Pack(5, self, translation, Py_None, nb, Py_True));
                            }
                        }
                    }
                }
            }
            Py_XDECREF(seen);
            if (answered)
                return result;
        }
    }
    return PyObject_Call(fc->twin, args, kwargs);
}

/* device_keyword's `factory` (no draws). */
static PyObject *
call_factory(FastCall *fc, PyObject *args, PyObject *kwargs)
{
    PyObject *device, *translation, *changed, *result;
    int spec;
    if (!has_kwargs(kwargs))
        return PyObject_Call(fc->original, args, NULL);
    device = PyDict_GetItemWithError(kwargs, s_device);
    if (device == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_Call(fc->original, args, kwargs);
    }
    if (device == Py_None)
        return PyObject_Call(fc->original, args, kwargs);
    spec = PySet_Contains(fc->spec_types, (PyObject *)Py_TYPE(device));
    if (spec < 0)
        return NULL;
    if (!spec)
        return PyObject_Call(fc->original, args, kwargs);
    translation = PyDict_GetItemWithError(fc->cache, device);
    if (translation == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_Call(fc->twin, args, kwargs);  /* not cached: the twin translates */
    }
    Py_INCREF(translation);  /* the cache may change while the copy is made */
    changed = PyDict_Copy(kwargs);
    if (changed == NULL || PyDict_SetItem(changed, s_device, translation) < 0) {
        Py_DECREF(translation);
        Py_XDECREF(changed);
        return NULL;
    }
    Py_DECREF(translation);
    result = PyObject_Call(fc->original, args, changed);
    Py_DECREF(changed);
    return result;
}

/* device_keyword's `drawing` (random factories on the cpu target). */
static PyObject *
call_drawing(FastCall *fc, PyObject *args, PyObject *kwargs)
{
    PyObject *device, *seen;
    if (!has_kwargs(kwargs)) {
        if (!fc->undirected)
            return PyObject_Call(fc->original, args, NULL);
        return PyObject_Call(fc->twin, args, kwargs);
    }
    device = PyDict_GetItemWithError(kwargs, s_device);
    if (device == NULL && PyErr_Occurred())
        return NULL;
    if (device == NULL || device == Py_None || PyDict_Size(kwargs) != 1)
        return PyObject_Call(fc->twin, args, kwargs);
    seen = PyCell_Get(fc->last);
    if (seen != NULL && PyTuple_Check(seen) && PyTuple_Size(seen) >= 3 && device == PyTuple_GetItem(seen, 0)) {
        PyObject *generator = PyTuple_GetItem(seen, 2), *changed, *result;
        if (generator == fc->current)
            generator = PyObject_CallObject(fc->current, NULL);
        else
            Py_INCREF(generator);
        if (generator == NULL) {
            Py_DECREF(seen);
            return NULL;
        }
        changed = PyDict_New();
        if (changed == NULL || PyDict_SetItem(changed, s_device, PyTuple_GetItem(seen, 1)) < 0
                || PyDict_SetItem(changed, s_generator, generator) < 0) {
            Py_XDECREF(changed);
            Py_DECREF(generator);
            Py_DECREF(seen);
            return NULL;
        }
        Py_DECREF(generator);
        Py_DECREF(seen);
        result = PyObject_Call(fc->original, args, changed);
        Py_DECREF(changed);
        return result;
    }
    Py_XDECREF(seen);
    return PyObject_Call(fc->twin, args, kwargs);
}

/* The cpu target's Module.to (cpu/target.py module_to): no keyword, and a first argument
 * after self that is no device spec (model.to(torch.bfloat16)): the original at once. */
static PyObject *
call_method(FastCall *fc, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_Size(args);
    if (!has_kwargs(kwargs) && n >= 1) {
        int spec = 0;
        if (n >= 2) {
            spec = PySet_Contains(fc->spec_types, (PyObject *)Py_TYPE(PyTuple_GetItem(args, 1)));
            if (spec < 0)
                return NULL;
        }
        if (!spec)
            return PyObject_Call(fc->original, args, NULL);
    }
    return PyObject_Call(fc->twin, args, kwargs);
}

static PyObject *
fc_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    FastCall *fc = (FastCall *)self;
    switch (fc->kind) {
    case K_TO:
    case K_TO_COPY:
        return call_to(fc, args, kwargs);
    case K_FACTORY:
        return call_factory(fc, args, kwargs);
    case K_METHOD:
        return call_method(fc, args, kwargs);
    case K_NOARGS:  /* a call without arguments: the original (a C getter); anything else: the twin's error */
        if (PyTuple_Size(args) == 0 && !has_kwargs(kwargs))
            return PyObject_CallObject(fc->original, NULL);
        return PyObject_Call(fc->twin, args, kwargs);
    default:
        return call_drawing(fc, args, kwargs);
    }
}

/* --- vectorcall (Python 3.9+): the same cases as above, without the argument tuple ---------- */

static int
is_name(PyObject *name, PyObject *interned)
{
    return name == interned || PyUnicode_Compare(name, interned) == 0;
}

/* The tp_call path, for what the vectorcall path does not answer itself: the twin. */
static PyObject *
vc_twin(FastCall *fc, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return vcall(fc->twin, args, nargsf, kwnames);
}

static PyObject *
vc_to(FastCall *fc, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = VC_NARGS(nargsf), nkw = kwnames == NULL ? 0 : PyTuple_Size(kwnames);
    if (n >= 2) {
        PyObject *self = args[0], *first = args[1];
        PyObject *plain = PyCell_Get(fc->plain);
        int is_plain = first == plain;
        Py_XDECREF(plain);
        if (is_plain) {
            if (nkw == 0 && (n == 2 || n == 4))
                return vcall(fc->original, args, nargsf, NULL);
        }
        else if (n == 2 && (nkw == 0 || (nkw == 1 && is_name(PyTuple_GetItem(kwnames, 0), s_non_blocking)))) {
            PyObject *seen = PyCell_Get(fc->last), *result = NULL;
            int answered = 0;
            if (seen != NULL && PyTuple_Check(seen) && PyTuple_Size(seen) >= 2
                    && first == PyTuple_GetItem(seen, 0)) {
                PyObject *call[5];
                call[0] = self;
                call[1] = PyTuple_GetItem(seen, 1);
                call[2] = Py_None;
                if (fc->kind == K_TO) {
                    if (nkw == 0) {
                        answered = 1;
                        result = vcall(fc->original, call, 2, NULL);
                    }
                    else if (fc->to_signature) {
                        answered = 1;
                        call[3] = args[2];
                        result = vcall(fc->original, call, 4, NULL);
                    }
                }
                else if (PyTuple_Size(seen) >= 3) {
                    int moved = PyObject_IsTrue(PyTuple_GetItem(seen, 2));
                    if (moved < 0) {
                        Py_DECREF(seen);
                        return NULL;
                    }
                    if (moved) {
                        answered = 1;
                        call[3] = nkw == 0 ? Py_False : args[2];
                        call[4] = Py_True;
                        result = vcall(fc->original, call, 5, NULL);
                    }
                }
            }
            Py_XDECREF(seen);
            if (answered)
                return result;
        }
    }
    return vc_twin(fc, args, nargsf, kwnames);
}

/* The index of keyword `name` among kwnames, or -1. */
static Py_ssize_t
keyword_index(PyObject *kwnames, PyObject *name)
{
    Py_ssize_t i, nkw = kwnames == NULL ? 0 : PyTuple_Size(kwnames);
    for (i = 0; i < nkw; i++)
        if (is_name(PyTuple_GetItem(kwnames, i), name))
            return i;
    return -1;
}

#define VC_MAX 12  /* arguments handled on the stack; longer calls go to the twin */

static PyObject *
vc_factory(FastCall *fc, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = VC_NARGS(nargsf), nkw, at;
    PyObject *device, *translation, *call[VC_MAX], *result;
    int spec;
    if (kwnames == NULL || (nkw = PyTuple_Size(kwnames)) == 0)
        return vcall(fc->original, args, nargsf, NULL);
    at = keyword_index(kwnames, s_device);
    if (at < 0)
        return vcall(fc->original, args, nargsf, kwnames);
    device = args[n + at];
    if (device == Py_None)
        return vcall(fc->original, args, nargsf, kwnames);
    spec = PySet_Contains(fc->spec_types, (PyObject *)Py_TYPE(device));
    if (spec < 0)
        return NULL;
    if (!spec)
        return vcall(fc->original, args, nargsf, kwnames);
    translation = PyDict_GetItemWithError(fc->cache, device);
    if (translation == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return vc_twin(fc, args, nargsf, kwnames);
    }
    if (n + nkw > VC_MAX)
        return vc_twin(fc, args, nargsf, kwnames);
    Py_INCREF(translation);
    memcpy(call, args, (size_t)(n + nkw) * sizeof(PyObject *));
    call[n + at] = translation;
    result = vcall(fc->original, call, (size_t)n, kwnames);
    Py_DECREF(translation);
    return result;
}

static PyObject *
vc_drawing(FastCall *fc, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = VC_NARGS(nargsf);
    PyObject *seen, *call[VC_MAX], *result = NULL;
    int answered = 0;
    if (kwnames == NULL || PyTuple_Size(kwnames) == 0) {
        if (!fc->undirected)
            return vcall(fc->original, args, nargsf, NULL);
        return vc_twin(fc, args, nargsf, kwnames);
    }
    if (PyTuple_Size(kwnames) != 1 || !is_name(PyTuple_GetItem(kwnames, 0), s_device) || args[n] == Py_None
            || n + 2 > VC_MAX)
        return vc_twin(fc, args, nargsf, kwnames);
    seen = PyCell_Get(fc->last);
    if (seen != NULL && PyTuple_Check(seen) && PyTuple_Size(seen) >= 3 && args[n] == PyTuple_GetItem(seen, 0)) {
        PyObject *generator = PyTuple_GetItem(seen, 2);
        if (generator == fc->current)
            generator = PyObject_CallObject(fc->current, NULL);
        else
            Py_INCREF(generator);
        answered = 1;
        if (generator != NULL) {
            memcpy(call, args, (size_t)n * sizeof(PyObject *));
            call[n] = PyTuple_GetItem(seen, 1);
            call[n + 1] = generator;
            result = vcall(fc->original, call, (size_t)n, device_generator);
            Py_DECREF(generator);
        }
    }
    Py_XDECREF(seen);
    if (answered)
        return result;
    return vc_twin(fc, args, nargsf, kwnames);
}

static PyObject *
vc_method(FastCall *fc, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = VC_NARGS(nargsf);
    if ((kwnames == NULL || PyTuple_Size(kwnames) == 0) && n >= 1) {
        int spec = 0;
        if (n >= 2) {
            spec = PySet_Contains(fc->spec_types, (PyObject *)Py_TYPE(args[1]));
            if (spec < 0)
                return NULL;
        }
        if (!spec)
            return vcall(fc->original, args, nargsf, NULL);
    }
    return vc_twin(fc, args, nargsf, kwnames);
}

static PyObject *
fc_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastCall *fc = (FastCall *)self;
    switch (fc->kind) {
    case K_TO:
    case K_TO_COPY:
        return vc_to(fc, args, nargsf, kwnames);
    case K_FACTORY:
        return vc_factory(fc, args, nargsf, kwnames);
    case K_METHOD:
        return vc_method(fc, args, nargsf, kwnames);
    case K_NOARGS:
        if (VC_NARGS(nargsf) == 0 && (kwnames == NULL || PyTuple_Size(kwnames) == 0))
            return vcall(fc->original, args, nargsf, NULL);
        return vc_twin(fc, args, nargsf, kwnames);
    default:
        return vc_drawing(fc, args, nargsf, kwnames);
    }
}

/* A method, as a Python function is: x.to binds, Tensor.to is the wrapper itself. */
static PyObject *
fc_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyObject_CallFunctionObjArgs(method_type, self, obj, NULL);
}

/* Attributes as a function's: the instance's own first (__name__, __doc__, __module__, ...). */
static PyObject *
fc_getattro(PyObject *self, PyObject *name)
{
    FastCall *fc = (FastCall *)self;
    PyObject *value = PyDict_GetItemWithError(fc->dict, name);
    if (value != NULL) {
        Py_INCREF(value);
        return value;
    }
    if (PyErr_Occurred())
        return NULL;
    return PyObject_GenericGetAttr(self, name);
}

static int
fc_setattro(PyObject *self, PyObject *name, PyObject *value)
{
    FastCall *fc = (FastCall *)self;
    if (value == NULL) {
        if (PyDict_DelItem(fc->dict, name) < 0) {
            if (PyErr_ExceptionMatches(PyExc_KeyError)) {
                PyErr_Clear();
                PyErr_SetObject(PyExc_AttributeError, name);
            }
            return -1;
        }
        return 0;
    }
    return PyDict_SetItem(fc->dict, name, value);
}

static PyObject *
fc_get_dict(PyObject *self, void *closure)
{
    PyObject *dict = ((FastCall *)self)->dict;
    Py_INCREF(dict);
    return dict;
}

/* __doc__, __name__, __qualname__, __module__ as data descriptors too, so that a lookup that
 * bypasses fc_getattro (object.__getattribute__: pydoc's _getowndoc) finds the instance's. */
static PyObject *
fc_get_named(PyObject *self, void *closure)
{
    PyObject *value = PyDict_GetItemString(((FastCall *)self)->dict, (const char *)closure);
    if (value == NULL)
        value = Py_None;
    Py_INCREF(value);
    return value;
}

static int
fc_set_named(PyObject *self, PyObject *value, void *closure)
{
    PyObject *dict = ((FastCall *)self)->dict;
    if (value == NULL) {
        if (PyDict_GetItemString(dict, (const char *)closure) == NULL)
            return 0;
        return PyDict_DelItemString(dict, (const char *)closure);
    }
    return PyDict_SetItemString(dict, (const char *)closure, value);
}

static PyObject *
fc_get_twin(PyObject *self, void *closure)
{
    PyObject *twin = ((FastCall *)self)->twin;
    Py_INCREF(twin);
    return twin;
}

/* The twin's closure cells this object reads, (last, plain) (None where its kind reads none): the
 * contract with the twin (patches/_calls.py TWIN_CELLS), checked by tests/test_twin_cells.py. */
static PyObject *
fc_get_cells(PyObject *self, void *closure)
{
    FastCall *fc = (FastCall *)self;
    return PyTuple_Pack(2, fc->last, fc->plain);
}

/* Pickles by reference, as a function does: pickle looks __module__.__qualname__ up and
 * checks it finds this object (transfer/presentation.py); copy/deepcopy return it. */
static PyObject *
fc_reduce(PyObject *self, PyObject *unused)
{
    return PyObject_GetAttr(self, s_qualname);
}

static PyObject *
fc_repr(PyObject *self)
{
    PyObject *qualname = PyObject_GetAttr(self, s_qualname), *repr;
    if (qualname == NULL) {
        PyErr_Clear();
        return PyUnicode_FromFormat("<transfer fast call at %p>", self);
    }
    repr = PyUnicode_FromFormat("<transfer fast call %S at %p>", qualname, self);
    Py_DECREF(qualname);
    return repr;
}

static void
fc_dealloc(PyObject *self)
{
    FastCall *fc = (FastCall *)self;
    PyTypeObject *type = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    Py_XDECREF(fc->twin);
    Py_XDECREF(fc->original);
    Py_XDECREF(fc->last);
    Py_XDECREF(fc->plain);
    Py_XDECREF(fc->cache);
    Py_XDECREF(fc->spec_types);
    Py_XDECREF(fc->current);
    Py_XDECREF(fc->dict);
    tp_free(self);
    Py_DECREF(type);
}

static PyMethodDef fc_methods[] = {
    {"__reduce__", fc_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef fc_getset[] = {
    {"__dict__", fc_get_dict, NULL, NULL, NULL},
    {"__doc__", fc_get_named, fc_set_named, NULL, "__doc__"},
    {"__name__", fc_get_named, fc_set_named, NULL, "__name__"},
    {"__qualname__", fc_get_named, fc_set_named, NULL, "__qualname__"},
    {"__module__", fc_get_named, fc_set_named, NULL, "__module__"},
    {"__transfer_python__", fc_get_twin, NULL, "the Python wrapper this object stands in for", NULL},
    {"__transfer_cells__", fc_get_cells, NULL, "the twin's closure cells read here: (last, plain)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef fc_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastCall, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef no_members[] = {
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot fc_slots[] = {
    {Py_tp_members, NULL},  /* fc_members where vectorcall is used (module init) */
    {Py_tp_call, fc_call},
    {Py_tp_descr_get, fc_descr_get},
    {Py_tp_getattro, fc_getattro},
    {Py_tp_setattro, fc_setattro},
    {Py_tp_repr, fc_repr},
    {Py_tp_dealloc, fc_dealloc},
    {Py_tp_methods, fc_methods},
    {Py_tp_getset, fc_getset},
    {0, NULL},
};

static PyType_Spec fc_spec = {
    "transfer._fastcalls.FastCall",
    sizeof(FastCall),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_METHOD_DESCRIPTOR,
    fc_slots,
};

static PyObject *fast_type;

/* make(kind, twin, original, last, plain, cache, spec_types, current, flag) */
static PyObject *
make(PyObject *module, PyObject *args)
{
    int kind, flag;
    PyObject *twin, *original, *last, *plain, *cache, *spec_types, *current;
    FastCall *fc;
    allocfunc tp_alloc;
    if (!PyArg_ParseTuple(args, "iOOOOOOOp", &kind, &twin, &original, &last, &plain, &cache, &spec_types,
                          &current, &flag))
        return NULL;
    if (kind < 0 || kind > K_LAST) {
        PyErr_SetString(PyExc_ValueError, "unknown kind");
        return NULL;
    }
    if (!PyCallable_Check(twin) || !PyCallable_Check(original)) {
        PyErr_SetString(PyExc_TypeError, "twin and original must be callable");
        return NULL;
    }
    if ((kind == K_TO || kind == K_TO_COPY) && (last == Py_None || plain == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "to: the memo cells are required");
        return NULL;
    }
    if ((kind == K_FACTORY || kind == K_METHOD) && !PyFrozenSet_Check(spec_types)) {
        PyErr_SetString(PyExc_TypeError, "a frozenset of types is required");
        return NULL;
    }
    if (kind == K_FACTORY && !PyDict_Check(cache)) {
        PyErr_SetString(PyExc_TypeError, "factory: a dict cache and a frozenset of types are required");
        return NULL;
    }
    if (kind == K_DRAWING && last == Py_None) {
        PyErr_SetString(PyExc_TypeError, "drawing: the memo cell is required");
        return NULL;
    }
    tp_alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)fast_type, Py_tp_alloc);
    fc = (FastCall *)tp_alloc((PyTypeObject *)fast_type, 0);
    if (fc == NULL)
        return NULL;
    fc->dict = PyDict_New();
    if (fc->dict == NULL) {
        Py_DECREF(fc);
        return NULL;
    }
    fc->kind = kind;
    fc->vectorcall = use_vectorcall ? fc_vectorcall : NULL;
    fc->to_signature = kind == K_TO && flag;
    fc->undirected = kind == K_DRAWING && flag;
#define KEEP(field, value) (Py_INCREF(value), fc->field = (value))
    KEEP(twin, twin);
    KEEP(original, original);
    KEEP(last, last);
    KEEP(plain, plain);
    KEEP(cache, cache);
    KEEP(spec_types, spec_types);
    KEEP(current, current);
#undef KEEP
    return (PyObject *)fc;
}

/* torch.device(N) as on a CUDA build: cuda:N (patches/accelerator.py). torch >= 2.6 resolves an int
 * device to "the accelerator" (at::getAccelerator(true)): a CPU-only build of torch has none and
 * raises "Cannot access accelerator device when none is available", and where a vendor's plug-in is
 * loaded it is the plug-in's device (npu:N), where a CUDA build answers cuda:N. torch.device is a
 * static C type whose __new__ cannot be set from Python, so its tp_new slot is swapped for
 * device_new, which passes ("cuda", N) for a lone non-negative int and everything else, unchanged,
 * to torch's own tp_new (errors included). On the cpu target every such call is answered so; on a
 * vendor target only the user's script's (torch and libraries keep the plug-in's answer): the
 * calling frame's file is looked up in frames.SCRIPT_VERDICTS (1 the script, 0 not), and
 * frames.is_script(frame) decides a file not seen yet. The slot is reached through
 * the layout CPython's PyTypeObject has had from 3.0 to 3.14 up to tp_new (not declared by the
 * limited API), checked on the type's name (and on 3.10+ against PyType_GetSlot) first. */
typedef struct {
    PyVarObject ob_base;
    const char *tp_name;
    Py_ssize_t tp_basicsize, tp_itemsize;
    void *tp_dealloc;
    Py_ssize_t tp_vectorcall_offset;
    void *tp_getattr, *tp_setattr, *tp_as_async, *tp_repr, *tp_as_number, *tp_as_sequence, *tp_as_mapping;
    void *tp_hash, *tp_call, *tp_str, *tp_getattro, *tp_setattro, *tp_as_buffer;
    unsigned long tp_flags;
    const char *tp_doc;
    void *tp_traverse, *tp_clear, *tp_richcompare;
    Py_ssize_t tp_weaklistoffset;
    void *tp_iter, *tp_iternext, *tp_methods, *tp_members, *tp_getset, *tp_base;
    PyObject *tp_dict;
    void *tp_descr_get, *tp_descr_set;
    Py_ssize_t tp_dictoffset;
    void *tp_init, *tp_alloc;
    newfunc tp_new;
} type_head;

static newfunc native_device_new;
static PyObject *s_cuda, *s_f_code, *s_co_filename;
static long python_minor;
static PyObject *script_verdicts;  /* vendor targets: frames.SCRIPT_VERDICTS; NULL on the cpu target */
static PyObject *ask_script;       /* frames.is_script, for a file script_verdicts does not hold yet */

/* 1 when torch.device(N) is being called by the user's script (always, without script_verdicts), 0 when by
 * torch, a library or C code (no Python frame), -1 with an exception set. */
static int
called_by_script(void)
{
    PyObject *frame, *code, *filename, *known, *answer;
    int verdict;
    if (script_verdicts == NULL)
        return 1;
    frame = (PyObject *)PyEval_GetFrame();  /* borrowed: the Python frame that called torch.device */
    if (frame == NULL)
        return 0;
    code = PyObject_GetAttr(frame, s_f_code);
    if (code == NULL)
        return -1;
    filename = PyObject_GetAttr(code, s_co_filename);
    Py_DECREF(code);
    if (filename == NULL)
        return -1;
    known = PyDict_GetItemWithError(script_verdicts, filename);  /* borrowed */
    Py_DECREF(filename);
    if (known == NULL && PyErr_Occurred())
        return -1;
    if (known != NULL && PyLong_Check(known)) {
        long value = PyLong_AsLong(known);
        if (value == 0 || value == 1)
            return (int)value;
    }
    answer = PyObject_CallFunctionObjArgs(ask_script, frame, NULL);  /* a new file, or code from a string */
    if (answer == NULL)
        return -1;
    verdict = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return verdict;
}

static PyObject *
device_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if ((kwds == NULL || PyDict_Size(kwds) == 0) && PyTuple_Size(args) == 1) {
        PyObject *arg = PyTuple_GetItem(args, 0), *pair, *result;
        if (arg != NULL && PyLong_Check(arg) && !PyBool_Check(arg)) {
            long long index = PyLong_AsLongLong(arg);
            if (index == -1 && PyErr_Occurred())
                PyErr_Clear();  /* out of range: torch's own parser says so */
            else if (index >= 0) {
                int mine = called_by_script();
                if (mine < 0)
                    return NULL;
                if (!mine)
                    return native_device_new(type, args, kwds);
                pair = PyTuple_Pack(2, s_cuda, arg);
                if (pair == NULL)
                    return NULL;
                result = native_device_new(type, pair, NULL);
                Py_DECREF(pair);
                return result;
            }
        }
    }
    return native_device_new(type, args, kwds);
}

/* int_device(type, on[, verdicts, ask]): swap (on) or restore (off) torch.device's tp_new; True when it
 * changed. With `verdicts` and `ask` (a vendor target) only the user's script's calls are answered cuda:N. */
static PyObject *
int_device(PyObject *module, PyObject *args)
{
    PyObject *type, *verdicts = Py_None, *ask = Py_None;
    int on;
    type_head *head;
    if (!PyArg_ParseTuple(args, "Op|OO", &type, &on, &verdicts, &ask))
        return NULL;
    if ((verdicts == Py_None) != (ask == Py_None) || (verdicts != Py_None && !PyDict_Check(verdicts))) {
        PyErr_SetString(PyExc_TypeError, "verdicts (a dict) and ask (a callable) go together");
        return NULL;
    }
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "a type is required");
        return NULL;
    }
    head = (type_head *)type;
    if (head->tp_name == NULL || strcmp(head->tp_name, "torch.device") != 0 || head->tp_new == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "not torch.device, or an unknown type layout");
        return NULL;
    }
    if (python_minor >= 10 && (newfunc)PyType_GetSlot((PyTypeObject *)type, Py_tp_new) != head->tp_new) {
        PyErr_SetString(PyExc_RuntimeError, "unknown type layout");
        return NULL;
    }
    if (on) {
        if (head->tp_new == device_new)
            Py_RETURN_FALSE;
        Py_CLEAR(script_verdicts);
        Py_CLEAR(ask_script);
        if (verdicts != Py_None) {
            Py_INCREF(verdicts);
            Py_INCREF(ask);
            script_verdicts = verdicts;
            ask_script = ask;
        }
        native_device_new = head->tp_new;
        head->tp_new = device_new;
    }
    else {
        if (head->tp_new != device_new)
            Py_RETURN_FALSE;
        head->tp_new = native_device_new;
        Py_CLEAR(script_verdicts);
        Py_CLEAR(ask_script);
    }
    PyType_Modified((PyTypeObject *)type);
    Py_RETURN_TRUE;
}

static PyMethodDef module_methods[] = {
    {"make", make, METH_VARARGS,
     "make(kind, twin, original, last, plain, cache, spec_types, current, flag): a FastCall (see the C source)"},
    {"int_device", int_device, METH_VARARGS,
     "int_device(torch.device, on[, verdicts, ask]): torch.device(N) as cuda:N (on; with verdicts and ask, for "
     "the user's script alone) or torch's own (off); True when changed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "transfer._fastcalls", "C hot frames of transfer's call wrappers.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__fastcalls(void)
{
    PyObject *module, *types;
    s_device = PyUnicode_InternFromString("device");
    s_generator = PyUnicode_InternFromString("generator");
    s_non_blocking = PyUnicode_InternFromString("non_blocking");
    s_qualname = PyUnicode_InternFromString("__qualname__");
    s_cuda = PyUnicode_InternFromString("cuda");
    s_f_code = PyUnicode_InternFromString("f_code");
    s_co_filename = PyUnicode_InternFromString("co_filename");
    if (!s_device || !s_generator || !s_non_blocking || !s_qualname || !s_cuda || !s_f_code || !s_co_filename)
        return NULL;
    types = PyImport_ImportModule("types");
    if (types == NULL)
        return NULL;
    method_type = PyObject_GetAttrString(types, "MethodType");
    Py_DECREF(types);
    if (method_type == NULL)
        return NULL;
    device_generator = Py_BuildValue("(OO)", s_device, s_generator);
    if (device_generator == NULL)
        return NULL;
    object_vectorcall = NULL;
#ifndef _WIN32
    {
        PyObject *sys = PyImport_ImportModule("sys"), *version;
        long minor = 0;
        if (sys == NULL)
            return NULL;
        version = PyObject_GetAttrString(sys, "version_info");
        Py_DECREF(sys);
        if (version == NULL)
            return NULL;
        minor = PyLong_AsLong(PyTuple_GetItem(version, 1));
        Py_DECREF(version);
        python_minor = minor;
        if (minor >= 9) {
            object_vectorcall = (vectorcall_t)dlsym(RTLD_DEFAULT, "PyObject_Vectorcall");
            object_vectorcall_dict = (vectorcall_dict_t)dlsym(RTLD_DEFAULT, "PyObject_VectorcallDict");
            use_vectorcall = object_vectorcall != NULL || object_vectorcall_dict != NULL;
        }
    }
#endif
    if (use_vectorcall) {
        fc_slots[0].pfunc = fc_members;
        fc_spec.flags |= HAVE_VECTORCALL_FLAG;
    }
    else {
        fc_slots[0].pfunc = no_members;
    }
    fast_type = PyType_FromSpec(&fc_spec);
    if (fast_type == NULL)
        return NULL;
    module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(fast_type);
    if (PyModule_AddObject(module, "FastCall", fast_type) < 0
            || PyModule_AddIntConstant(module, "TO", K_TO) < 0
            || PyModule_AddIntConstant(module, "TO_COPY", K_TO_COPY) < 0
            || PyModule_AddIntConstant(module, "FACTORY", K_FACTORY) < 0
            || PyModule_AddIntConstant(module, "DRAWING", K_DRAWING) < 0
            || PyModule_AddIntConstant(module, "METHOD", K_METHOD) < 0
            || PyModule_AddIntConstant(module, "NOARGS", K_NOARGS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
