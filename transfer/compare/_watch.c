/* The accuracy mode's per-operation path in C (transfer/compare/watch.py is the contract and
 * its Python twin, PyWatch; read that first).
 *
 * One type, Watch, the base of the dispatch mode `watch.CWatch` (with TorchDispatchMode): its
 * method __torch_dispatch__ is what torch calls for every operation while the mode is on (torch
 * checks that the handler's __self__ is the mode: a method of the mode's own type is). It does
 * what PyWatch.__torch_dispatch__ does, in the same order, and answers itself the common case
 * of the checker's look (`fast`):
 *   FAST_NONFINITE: every floating output a contiguous tensor in host memory: scanned in place
 *     for inf/NaN (the exponent's bits); all finite: done; else the session decides (torch's own
 *     reading, the same as the Python twin's);
 *   FAST_DIGEST: the first output a contiguous host tensor of a floating, integer or boolean
 *     dtype: its digest appended to `sink` (floating: sum and norm in double, four samples; integer
 *     and boolean: sum and sum of squares in int64 arithmetic, four samples, all exact integers).
 * Everything else goes to the session as from the Python twin (`after`, `slow`, `learn`).
 * The cheap level (sentinels.py) reads host tensors with the same code: the methods `scan` and
 * `digest`; `resolve` gives the pending node its where (and `node_hook` is called with each node
 * that gets one).
 *
 * Built against the limited API of Python 3.8 (one abi3 build for 3.8-3.12), like
 * transfer/_fastcalls.c; PyFrame_GetBack/GetCode (3.9+) and PyObject_VectorcallMethod (3.9+)
 * are looked up when the module loads, with the attribute spellings (f_back, f_code) or a bound
 * method call where they are missing.
 */
#define Py_LIMITED_API 0x03080000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifndef _WIN32
#include <dlfcn.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")  /* the scans vectorise */
#endif
/* The scans read every byte of an output once: one build per vector width (GCC's function clones,
 * chosen by the CPU when the module loads), the baseline SSE2 one where neither is there. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

/* flags of an operation (watch.py) */
#define F_SKIP 1
#define F_SLOW 2
#define F_ENDS_STEP 4
#define F_MUTABLE 8
/* fast paths (watch.py) */
#define FAST_NONE 0
#define FAST_NONFINITE 1
#define FAST_DIGEST 2

/* element kinds, in the order of the `dtypes` tuple given to Watch() */
enum { K_F32, K_F64, K_F16, K_BF16, K_I64, K_I32, K_I16, K_I8, K_U8, K_BOOL, K_COUNT, K_OTHER = -1 };
#define IS_FLOAT(k) ((k) >= K_F32 && (k) <= K_BF16)

#ifndef Py_XSETREF
#define Py_XSETREF(op, op2) do { PyObject *old_ = (PyObject *)(op); (op) = (op2); Py_XDECREF(old_); } while (0)
#endif
struct _frame;
PyAPI_FUNC(struct _frame *) PyEval_GetFrame(void);
PyAPI_FUNC(int) PyFrame_GetLineNumber(struct _frame *);

typedef PyObject *(*frame_fn)(PyObject *);
typedef PyObject *(*vectorcall_method_t)(PyObject *, PyObject *const *, size_t, PyObject *);
static frame_fn frame_get_back, frame_get_code;  /* PyFrame_GetBack / PyFrame_GetCode, or NULL */
static vectorcall_method_t vectorcall_method;   /* PyObject_VectorcallMethod, or NULL */
static long python_minor;

static PyObject *s_sum, *s_flush, *empty_tuple;
static PyObject *s_learn, *s_slow, *s_after, *s_grad_fn, *s_metadata, *s_co_filename, *s_f_back, *s_f_code,
    *s_dtype, *s_is_cpu, *s_is_contiguous, *s_numel, *s_data_ptr, *s_shape, *s_stride, *s_forward,
    *s_backward, *s_empty, *s_unknown, *s_key, *no_where;

typedef struct {
    PyObject_HEAD
    PyObject *session;      /* the Python session: learn, slow, after */
    PyObject *infos;        /* dict: func -> (callable, flags, aten name, short name) */
    PyObject *modules;      /* list: the module stack (the session's hooks) */
    PyObject *pending_tensor, *pending_where;
    PyObject *sink;         /* list: digest items (FAST_DIGEST), the checker's flags (FAST_NONFINITE) */
    PyObject *producers;    /* dict (FAST_NONFINITE): id(tensor) -> (weak reference, operation index) */
    PyObject *sum32;        /* {"dtype": torch.float32}: the flag of a 16-bit output */
    PyObject *current_node; /* torch._C._current_autograd_node */
    PyObject *grad_enabled; /* torch.is_grad_enabled */
    PyObject *file_kind;    /* transfer.frames.kind */
    PyObject *user_kind;    /* transfer.frames.USER */
    PyObject *tensor_type;  /* torch.Tensor */
    PyObject *node_hook;    /* None, or called with each autograd node given a where (sentinels.py) */
    PyObject *dtypes[K_COUNT];
    long long index, checked;
    char checking, busy, ended;
    int fast;
} Watch;

/* ------------------------------------------------------------------ small helpers */

static PyObject *
call_method0(PyObject *obj, PyObject *name)
{
    if (vectorcall_method != NULL) {
        PyObject *args[1] = {obj};
        return vectorcall_method(name, args, 1, NULL);
    }
    return PyObject_CallMethodObjArgs(obj, name, NULL);
}

static int
is_tensor(Watch *w, PyObject *o)
{
    if ((PyObject *)Py_TYPE(o) == w->tensor_type)
        return 1;
    return PyObject_IsInstance(o, w->tensor_type) == 1;
}

static int
dtype_kind(Watch *w, PyObject *t)
{
    int k;
    PyObject *dtype = PyObject_GetAttr(t, s_dtype);
    if (dtype == NULL) {
        PyErr_Clear();
        return K_OTHER;
    }
    for (k = 0; k < K_COUNT; k++) {
        if (dtype == w->dtypes[k]) {
            Py_DECREF(dtype);
            return k;
        }
    }
    Py_DECREF(dtype);
    return K_OTHER;
}

/* t.<name> (a method called with no argument when `method`) as a number; -1 with the error cleared
 * when it is none. */
static Py_ssize_t
number_of(PyObject *t, PyObject *name, int method)
{
    PyObject *v = method ? call_method0(t, name) : PyObject_GetAttr(t, name);
    Py_ssize_t n;
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    n = v == Py_True ? 1 : v == Py_False ? 0 : PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (n < 0)
        PyErr_Clear();
    return n;
}

/* A contiguous host tensor's memory: 1 with *data and *n set, 0 when it is not one (any error cleared). */
static int
host_memory(PyObject *t, const void **data, Py_ssize_t *n)
{
    Py_ssize_t address;
    if (number_of(t, s_is_cpu, 0) != 1 || number_of(t, s_is_contiguous, 1) != 1 || (*n = number_of(t, s_numel, 1)) < 0)
        return 0;
    *data = NULL;
    if (*n == 0)
        return 1;
    address = number_of(t, s_data_ptr, 1);  /* a host address fits: user space is below 2**63 */
    if (address <= 0)
        return 0;
    *data = (const void *)address;
    return 1;
}

/* ------------------------------------------------------------------ reading memory */

/* Whether n elements hold inf or NaN: every bit of the exponent set, so that adding the exponent's
 * lowest bit carries into the sign's place. One scan per element width and exponent. */
#define NONFINITE_SCAN(NAME, T, EXPONENT, LOWEST, SIGN)            \
    static CLONES int NAME(const T *p, Py_ssize_t n)              \
    {                                                              \
        T bad = 0;                                                 \
        Py_ssize_t i;                                              \
        for (i = 0; i < n; i++)                                    \
            bad |= (T)((p[i] & (EXPONENT)) + (LOWEST));            \
        return (bad & (SIGN)) != 0;                                \
    }
NONFINITE_SCAN(nonfinite32, uint32_t, 0x7f800000u, 0x00800000u, 0x80000000u)
NONFINITE_SCAN(nonfinite64, uint64_t, 0x7ff0000000000000ull, 0x0010000000000000ull, 0x8000000000000000ull)
NONFINITE_SCAN(nonfinite_f16, uint16_t, 0x7c00u, 0x0400u, 0x8000u)
NONFINITE_SCAN(nonfinite_bf16, uint16_t, 0x7f80u, 0x0080u, 0x8000u)

static int
holds_nonfinite(const void *data, Py_ssize_t n, int k)
{
    switch (k) {
    case K_F32: return nonfinite32((const uint32_t *)data, n);
    case K_F64: return nonfinite64((const uint64_t *)data, n);
    case K_F16: return nonfinite_f16((const uint16_t *)data, n);
    case K_BF16: return nonfinite_bf16((const uint16_t *)data, n);
    }
    return 0;
}

static double bf16_to_double(uint16_t h);

static double
half_to_double(uint16_t h)
{
    unsigned sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    double v;
    if (exponent == 0)
        v = ldexp((double)mantissa, -24);
    else if (exponent == 31)
        v = mantissa ? NAN : INFINITY;
    else
        v = ldexp((double)(mantissa | 0x400), (int)exponent - 25);
    return sign ? -v : v;
}

static double
element(const void *data, Py_ssize_t i, int k)
{
    switch (k) {
    case K_F32: return ((const float *)data)[i];
    case K_F64: return ((const double *)data)[i];
    case K_F16: return half_to_double(((const uint16_t *)data)[i]);
    case K_BF16: return bf16_to_double(((const uint16_t *)data)[i]);
    case K_I64: return (double)((const int64_t *)data)[i];
    case K_I32: return ((const int32_t *)data)[i];
    case K_I16: return ((const int16_t *)data)[i];
    case K_I8: return ((const int8_t *)data)[i];
    case K_U8: return ((const uint8_t *)data)[i];
    case K_BOOL: return ((const uint8_t *)data)[i] != 0;
    }
    return NAN;
}

/* sum and sum of squares in double, eight running sums each (independent: they vectorise) */
#define LANES 8
#define SUMS_LOOP(T, CONVERT)                                                     \
    double s[LANES] = {0}, q[LANES] = {0};                                        \
    Py_ssize_t i = 0, j;                                                          \
    for (; i + LANES <= n; i += LANES)                                            \
        for (j = 0; j < LANES; j++) {                                             \
            double x = CONVERT(((const T *)data)[i + j]);                         \
            s[j] += x;                                                            \
            q[j] += x * x;                                                        \
        }                                                                         \
    for (j = 0; i < n; i++, j++) {                                                \
        double x = CONVERT(((const T *)data)[i]);                                 \
        s[j] += x;                                                                \
        q[j] += x * x;                                                            \
    }                                                                             \
    *sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));     \
    *squares = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]))
#define AS_DOUBLE(x) ((double)(x))

static CLONES void sums_f32(const void *data, Py_ssize_t n, double *sum, double *squares) { SUMS_LOOP(float, AS_DOUBLE); }
static CLONES void sums_f64(const void *data, Py_ssize_t n, double *sum, double *squares) { SUMS_LOOP(double, AS_DOUBLE); }

static double
bf16_to_double(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static CLONES void sums_bf16(const void *data, Py_ssize_t n, double *sum, double *squares) { SUMS_LOOP(uint16_t, bf16_to_double); }

static void
sums(const void *data, Py_ssize_t n, int k, double *sum, double *squares)
{
    Py_ssize_t i;
    double s = 0.0, q = 0.0;
    switch (k) {
    case K_F32: sums_f32(data, n, sum, squares); return;
    case K_F64: sums_f64(data, n, sum, squares); return;
    case K_BF16: sums_bf16(data, n, sum, squares); return;
    }
    for (i = 0; i < n; i++) {
        double x = element(data, i, k);
        s += x;
        q += x * x;
    }
    *sum = s;
    *squares = q;
}

/* Integer and boolean elements as int64 (uint64 arithmetic: wraps as torch's int64 sums do). */
static int64_t
integer(const void *data, Py_ssize_t i, int k)
{
    switch (k) {
    case K_I64: return ((const int64_t *)data)[i];
    case K_I32: return ((const int32_t *)data)[i];
    case K_I16: return ((const int16_t *)data)[i];
    case K_I8: return ((const int8_t *)data)[i];
    case K_U8: return ((const uint8_t *)data)[i];
    case K_BOOL: return ((const uint8_t *)data)[i] != 0;
    }
    return 0;
}

/* The digest's values of n elements of kind k (digest.py): floating [sum, norm, 4 samples] in double;
 * integer and boolean [sum, sum of squares, 4 samples] as exact integers (int64, wrapping). */
static PyObject *
digest_values(const void *data, Py_ssize_t n, int k)
{
    Py_ssize_t picks[4] = {0, n / 3, (2 * n) / 3, n - 1}, i;
    if (IS_FLOAT(k)) {
        double sum, squares;
        sums(data, n, k, &sum, &squares);
        return Py_BuildValue("[dddddd]", sum, sqrt(squares), element(data, picks[0], k), element(data, picks[1], k),
                             element(data, picks[2], k), element(data, picks[3], k));
    } else {
        uint64_t s = 0, q = 0;
        for (i = 0; i < n; i++) {
            uint64_t x = (uint64_t)integer(data, i, k);
            s += x;
            q += x * x;
        }
        return Py_BuildValue("[LLLLLL]", (long long)(int64_t)s, (long long)(int64_t)q, (long long)integer(data, picks[0], k),
                             (long long)integer(data, picks[1], k), (long long)integer(data, picks[2], k),
                             (long long)integer(data, picks[3], k));
    }
}

/* ------------------------------------------------------------------ where the operation comes from */

static PyObject *
frame_back(PyObject *f)
{
    PyObject *back;
    if (frame_get_back != NULL)
        return frame_get_back(f);
    back = PyObject_GetAttr(f, s_f_back);
    if (back == Py_None) {
        Py_DECREF(back);
        return NULL;
    }
    return back;
}

static PyObject *
frame_code(PyObject *f)
{
    if (frame_get_code != NULL)
        return frame_get_code(f);
    return PyObject_GetAttr(f, s_f_code);
}

/* Two direct-mapped memos (a slot per hash, a newcomer replaces the holder), each holding its code
 * object so that its address is not reused while it is remembered: whose code a code object is
 * (transfer.frames.kind == USER, asked once per code object), and the "file:line" text of a line. */
#define MEMO 1024
typedef struct { PyObject *code; int user; } kind_memo;
typedef struct { PyObject *code; int line; PyObject *text; } site_memo;
static kind_memo kind_memos[MEMO];
static site_memo site_memos[MEMO];

static size_t
slot(const void *p, int line)
{
    size_t h = (size_t)p >> 4;
    h ^= (size_t)line * 2654435761u;
    return (h ^ (h >> 10)) & (MEMO - 1);
}

/* 1 the user's code, 0 not, -1 error */
static int
is_user_code(Watch *w, PyObject *code)
{
    kind_memo *m = &kind_memos[slot(code, 0)];
    PyObject *kind;
    int user;
    if (m->code == code)
        return m->user;
    kind = PyObject_CallFunctionObjArgs(w->file_kind, code, NULL);
    if (kind == NULL)
        return -1;
    user = PyObject_RichCompareBool(kind, w->user_kind, Py_EQ);
    Py_DECREF(kind);
    if (user < 0)
        return -1;
    Py_INCREF(code);
    Py_XSETREF(m->code, code);
    m->user = user;
    return user;
}

static PyObject *
site_text(PyObject *code, int line)
{
    site_memo *m = &site_memos[slot(code, line)];
    PyObject *filename, *text;
    if (m->code == code && m->line == line) {
        Py_INCREF(m->text);
        return m->text;
    }
    filename = PyObject_GetAttr(code, s_co_filename);
    if (filename == NULL)
        return NULL;
    text = PyUnicode_FromFormat("%U:%d", filename, line);
    Py_DECREF(filename);
    if (text == NULL)
        return NULL;
    Py_INCREF(code);
    Py_XSETREF(m->code, code);
    m->line = line;
    Py_INCREF(text);
    Py_XSETREF(m->text, text);
    return text;
}

/* `watch.site`: "file:line" of the nearest frame of the user's code ("<unknown>" without one). */
static PyObject *
user_site(Watch *w)
{
    PyObject *f = (PyObject *)PyEval_GetFrame();
    Py_XINCREF(f);
    while (f != NULL) {
        PyObject *code = frame_code(f), *next;
        int user;
        if (code == NULL)
            goto fail;
        user = is_user_code(w, code);
        if (user < 0) {
            Py_DECREF(code);
            goto fail;
        }
        if (user) {
            PyObject *text = site_text(code, PyFrame_GetLineNumber((struct _frame *)f));
            Py_DECREF(code);
            Py_DECREF(f);
            return text;
        }
        Py_DECREF(code);
        next = frame_back(f);
        Py_DECREF(f);
        f = next;
    }
    if (PyErr_Occurred())
        return NULL;
    Py_INCREF(s_unknown);
    return s_unknown;
fail:
    Py_XDECREF(f);
    return NULL;
}

static PyObject *
forward_where(Watch *w)
{
    PyObject *site = user_site(w), *module, *where;
    Py_ssize_t depth;
    if (site == NULL)
        return NULL;
    depth = PyList_Size(w->modules);
    module = depth > 0 ? PyList_GetItem(w->modules, depth - 1) : s_empty;
    where = PyTuple_Pack(2, site, module);
    Py_DECREF(site);
    return where;
}

static PyObject *
backward_where(PyObject *node)
{
    PyObject *metadata = PyObject_GetAttr(node, s_metadata), *where = NULL;
    if (metadata == NULL) {
        PyErr_Clear();
    } else {
        where = PyObject_GetItem(metadata, s_key);
        if (where == NULL)
            PyErr_Clear();
        Py_DECREF(metadata);
    }
    if (where == NULL) {
        Py_INCREF(no_where);
        where = no_where;
    }
    return where;
}

/* The previous forward operation's output: its autograd node gets that operation's where. */
static void
resolve_pending(Watch *w)
{
    PyObject *tensor = w->pending_tensor, *where = w->pending_where, *node, *metadata;
    w->pending_tensor = w->pending_where = NULL;
    node = PyObject_GetAttr(tensor, s_grad_fn);
    if (node != NULL && node != Py_None) {
        metadata = PyObject_GetAttr(node, s_metadata);
        if (metadata != NULL) {
            int known = PySequence_Contains(metadata, s_key);
            if (known == 0 && where != NULL && PyObject_SetItem(metadata, s_key, where) == 0
                    && w->node_hook != NULL && w->node_hook != Py_None) {
                PyObject *r = PyObject_CallFunctionObjArgs(w->node_hook, node, NULL);
                Py_XDECREF(r);
            }
            Py_DECREF(metadata);
        }
    }
    Py_XDECREF(node);
    Py_DECREF(tensor);
    Py_XDECREF(where);
    PyErr_Clear();
}

static PyObject *
first_tensor(Watch *w, PyObject *out)
{
    Py_ssize_t i, n;
    if (is_tensor(w, out))
        return out;
    if (PyTuple_Check(out) || PyList_Check(out)) {
        n = PySequence_Size(out);
        for (i = 0; i < n; i++) {
            PyObject *item = PyTuple_Check(out) ? PyTuple_GetItem(out, i) : PyList_GetItem(out, i);
            if (item != NULL && is_tensor(w, item))
                return item;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ the checkers' quick look */

/* FAST_NONFINITE: the floating tensors of `values` (a tensor or a flat tuple/list) into `found`:
 * those in host memory scanned at once, those on a device into `device`. 1 go on, 0 the session's
 * reading (an output holding inf/NaN, not contiguous, nested), -1 error. */
static int
gather_floats(Watch *w, PyObject *values, PyObject *found, PyObject *device)
{
    Py_ssize_t i, n = 1;
    int tuple = PyTuple_Check(values), list = PyList_Check(values);
    if (tuple || list)
        n = PySequence_Size(values);
    for (i = 0; i < n; i++) {
        PyObject *t = tuple ? PyTuple_GetItem(values, i) : list ? PyList_GetItem(values, i) : values;
        const void *data;
        Py_ssize_t count;
        int k, host;
        if (t == NULL)
            return -1;
        if (!is_tensor(w, t)) {
            if (PyTuple_Check(t) || PyList_Check(t))
                return 0;  /* nested: the session's reading */
            continue;
        }
        k = dtype_kind(w, t);
        if (!IS_FLOAT(k))
            continue;
        host = (int)number_of(t, s_is_cpu, 0);
        if (host < 0)
            return 0;
        if (host) {
            if (!host_memory(t, &data, &count))
                return 0;
            if (count == 0)
                continue;
            if (holds_nonfinite(data, count, k))
                return 0;
        } else {
            count = number_of(t, s_numel, 1);
            if (count < 0)
                return 0;
            if (count == 0)
                continue;
            if (PyList_Append(device, t) < 0)
                return -1;
        }
        if (PyList_Append(found, t) < 0)
            return -1;
    }
    return 1;
}

/* The producer index of tensor `t` appended to `sources` (when a live producer is known). */
static int
add_source(Watch *w, PyObject *t, PyObject *sources)
{
    PyObject *key = PyLong_FromVoidPtr(t), *entry;
    if (key == NULL)
        return -1;
    entry = PyDict_GetItem(w->producers, key);  /* borrowed */
    Py_DECREF(key);
    if (entry != NULL && PyTuple_Check(entry) && PyTuple_Size(entry) == 2
            && PyWeakref_GetObject(PyTuple_GetItem(entry, 0)) == t)
        return PyList_Append(sources, PyTuple_GetItem(entry, 1));
    return 0;
}

static int
note_argument(Watch *w, PyObject *value, PyObject *sources, int *given)
{
    if (is_tensor(w, value))
        return add_source(w, value, sources);
    if (PyFloat_Check(value)) {
        double x = PyFloat_AsDouble(value);
        if (!isfinite(x))
            *given = 1;
        return 0;
    }
    if (PyList_Check(value) || PyTuple_Check(value)) {
        Py_ssize_t i, n = PySequence_Size(value);
        for (i = 0; i < n; i++) {
            PyObject *v = PyList_Check(value) ? PyList_GetItem(value, i) : PyTuple_GetItem(value, i);
            if (v != NULL && is_tensor(w, v) && add_source(w, v, sources) < 0)
                return -1;
        }
    }
    return 0;
}

/* What nonfinite.NonFinite.after does for outputs on a device (every other one finite in host memory):
 * the inputs' producers and non-finite numbers, the outputs' producer, one flag per output (its sum,
 * float32 for 16-bit floats) with the operation, read at the step's end. 1 done, 0 the session's, -1 error. */
static int
nonfinite_look(Watch *w, PyObject *out, PyObject *args, PyObject *kwargs, int flags, PyObject *info,
               long long index, int backward, PyObject *where)
{
    PyObject *found = PyList_New(0), *device = PyList_New(0), *sources = NULL, *lazy = NULL, *index_obj = NULL;
    Py_ssize_t i, n;
    int go, given = 0, result = -1;
    if (found == NULL || device == NULL)
        goto done;
    go = gather_floats(w, out, found, device);
    if (go == 1 && PyList_Size(found) == 0 && (flags & F_MUTABLE) && PyTuple_Size(args) > 0)
        go = gather_floats(w, PyTuple_GetItem(args, 0), found, device);
    if (go != 1) {
        result = go;
        goto done;
    }
    if (PyList_Size(device) == 0) {
        result = 1;
        goto done;
    }
    if (w->producers == NULL || !PyDict_Check(w->producers) || w->sink == NULL || !PyList_Check(w->sink)) {
        result = 0;
        goto done;
    }
    if ((sources = PyList_New(0)) == NULL)
        goto done;
    n = PyTuple_Size(args);
    for (i = 0; i < n; i++)
        if (note_argument(w, PyTuple_GetItem(args, i), sources, &given) < 0)
            goto done;
    if (kwargs != NULL) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &key, &value))
            if (note_argument(w, value, sources, &given) < 0)
                goto done;
    }
    if ((index_obj = PyLong_FromLongLong(index)) == NULL)
        goto done;
    n = PyList_Size(found);
    for (i = 0; i < n; i++) {
        PyObject *t = PyList_GetItem(found, i), *key, *ref, *entry;
        int failed;
        key = PyLong_FromVoidPtr(t);
        ref = PyWeakref_NewRef(t, NULL);
        entry = key != NULL && ref != NULL ? PyTuple_Pack(2, ref, index_obj) : NULL;
        failed = entry == NULL || PyDict_SetItem(w->producers, key, entry) < 0;
        Py_XDECREF(key);
        Py_XDECREF(ref);
        Py_XDECREF(entry);
        if (failed)
            goto done;
    }
    lazy = PyTuple_Pack(4, index_obj, info, backward ? Py_True : Py_False, where);
    if (lazy == NULL)
        goto done;
    n = PyList_Size(device);
    for (i = 0; i < n; i++) {
        PyObject *t = PyList_GetItem(device, i), *flag, *entry;
        int k = dtype_kind(w, t), failed;
        if (k == K_F16 || k == K_BF16) {
            PyObject *sum = PyObject_GetAttr(t, s_sum);
            flag = sum != NULL ? PyObject_Call(sum, empty_tuple, w->sum32) : NULL;
            Py_XDECREF(sum);
        } else {
            flag = call_method0(t, s_sum);
        }
        if (flag == NULL)
            goto done;
        entry = PyTuple_Pack(4, flag, lazy, sources, given ? Py_True : Py_False);
        Py_DECREF(flag);
        failed = entry == NULL || PyList_Append(w->sink, entry) < 0;
        Py_XDECREF(entry);
        if (failed)
            goto done;
    }
    result = 1;
    if (PyList_Size(w->sink) > 4096 || PyDict_Size(w->producers) > 32768) {  /* nonfinite._FLUSH_EVERY */
        PyObject *r = PyObject_CallMethodObjArgs(w->session, s_flush, NULL);
        if (r == NULL)
            result = -1;
        Py_XDECREF(r);
    }
done:
    Py_XDECREF(found);
    Py_XDECREF(device);
    Py_XDECREF(sources);
    Py_XDECREF(lazy);
    Py_XDECREF(index_obj);
    return result;
}

/* FAST_DIGEST: 1 the digest is in the sink, 2 no tensor to digest, 0 the session's, -1 error. */
static int
digest_look(Watch *w, PyObject *out, PyObject *args, int flags, PyObject *info, long long index, int backward,
            PyObject *where)
{
    PyObject *t = first_tensor(w, out), *values = NULL, *shape = NULL, *dtype = NULL, *stride = NULL, *item;
    PyObject *index_obj = NULL;
    const void *data;
    Py_ssize_t n;
    int k;
    if (t == NULL && (flags & F_MUTABLE) && PyTuple_Size(args) > 0)
        t = first_tensor(w, PyTuple_GetItem(args, 0));
    if (t == NULL)
        return 2;
    k = dtype_kind(w, t);
    if (k == K_OTHER || !host_memory(t, &data, &n))
        return 0;
    if (n == 0) {
        Py_INCREF(Py_None);
        values = Py_None;
    } else {
        values = digest_values(data, n, k);
        if (values == NULL)
            return -1;
    }
    shape = PyObject_GetAttr(t, s_shape);
    dtype = PyObject_GetAttr(t, s_dtype);
    stride = call_method0(t, s_stride);
    index_obj = PyLong_FromLongLong(index);
    if (shape == NULL || dtype == NULL || stride == NULL || index_obj == NULL) {
        item = NULL;
    } else {
        item = PyTuple_Pack(10, index_obj, PyTuple_GetItem(info, 2), PyTuple_GetItem(info, 3),
                            backward ? s_backward : s_forward, PyTuple_GetItem(where, 0),
                            PyTuple_GetItem(where, 1), shape, dtype, stride, values);
    }
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_XDECREF(stride);
    Py_XDECREF(index_obj);
    Py_DECREF(values);
    if (item == NULL)
        return -1;
    k = PyList_Append(w->sink, item);
    Py_DECREF(item);
    return k < 0 ? -1 : 1;
}

/* ------------------------------------------------------------------ __torch_dispatch__ */

static PyObject *
run(PyObject *call, PyObject *args, PyObject *kwargs)
{
    return PyObject_Call(call, args, kwargs);
}

static PyObject *
hand_over(Watch *w, PyObject *method, PyObject *func, PyObject *args, PyObject *kwargs, PyObject *out,
          PyObject *info, long long index, int backward, PyObject *where)
{
    PyObject *kw = kwargs, *index_obj, *result;
    if (kw == NULL && (kw = PyDict_New()) == NULL)
        return NULL;
    else if (kw == kwargs)
        Py_INCREF(kw);
    index_obj = PyLong_FromLongLong(index);
    if (index_obj == NULL) {
        Py_DECREF(kw);
        return NULL;
    }
    if (out != NULL)
        result = PyObject_CallMethodObjArgs(w->session, method, func, args, kw, out, info, index_obj,
                                            backward ? Py_True : Py_False, where, NULL);
    else
        result = PyObject_CallMethodObjArgs(w->session, method, func, args, kw, info, index_obj,
                                            backward ? Py_True : Py_False, where, NULL);
    Py_DECREF(index_obj);
    Py_DECREF(kw);
    return result;
}

static PyObject *
w_dispatch(PyObject *self, PyObject *targs)
{
    Watch *w = (Watch *)self;
    PyObject *func, *args, *kwargs = NULL, *info, *call, *node, *where = NULL, *out = NULL;
    Py_ssize_t nargs = PyTuple_Size(targs);
    long flags;
    long long index;
    int backward;
    if (nargs < 3) {
        PyErr_SetString(PyExc_TypeError, "__torch_dispatch__(func, types, args, kwargs)");
        return NULL;
    }
    func = PyTuple_GetItem(targs, 0);
    args = PyTuple_GetItem(targs, 2);
    if (nargs > 3) {
        kwargs = PyTuple_GetItem(targs, 3);
        if (kwargs == Py_None || !PyDict_Check(kwargs) || PyDict_Size(kwargs) == 0)
            kwargs = NULL;
    }
    if (!PyTuple_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "__torch_dispatch__: args is not a tuple");
        return NULL;
    }
    info = PyDict_GetItem(w->infos, func);
    if (info != NULL) {
        Py_INCREF(info);
    } else {
        info = PyObject_CallMethodObjArgs(w->session, s_learn, func, NULL);
        if (info == NULL)
            return NULL;
    }
    if (!PyTuple_Check(info) || PyTuple_Size(info) < 4) {
        Py_DECREF(info);
        PyErr_SetString(PyExc_TypeError, "Session.learn: (callable, flags, name, short) expected");
        return NULL;
    }
    call = PyTuple_GetItem(info, 0);
    flags = PyLong_AsLong(PyTuple_GetItem(info, 1));
    if (w->pending_tensor != NULL)
        resolve_pending(w);
    if (!w->checking || w->busy) {
        out = run(call, args, kwargs);
        if (out != NULL && (flags & F_ENDS_STEP))
            w->ended = 1;
        Py_DECREF(info);
        return out;
    }
    index = ++w->index;
    node = PyObject_CallObject(w->current_node, NULL);
    if (node == NULL)
        goto done;
    backward = node != Py_None;
    where = backward ? backward_where(node) : forward_where(w);
    Py_DECREF(node);
    if (where == NULL)
        goto done;
    if (flags & F_SLOW) {
        out = hand_over(w, s_slow, func, args, kwargs, NULL, info, index, backward, where);
    } else {
        out = run(call, args, kwargs);
        if (out != NULL && !(flags & F_SKIP)) {
            int looked = 0;
            if (w->fast == FAST_NONFINITE)
                looked = nonfinite_look(w, out, args, kwargs, (int)flags, info, index, backward, where);
            else if (w->fast == FAST_DIGEST && w->sink != NULL && PyList_Check(w->sink))
                looked = digest_look(w, out, args, (int)flags, info, index, backward, where);
            if (looked == 1) {
                w->checked++;
            } else if (looked == 0) {
                PyObject *r = hand_over(w, s_after, func, args, kwargs, out, info, index, backward, where);
                if (r == NULL)
                    Py_CLEAR(out);
                Py_XDECREF(r);
            } else if (looked < 0) {
                Py_CLEAR(out);
            }
        }
    }
    if (out != NULL && !backward) {
        PyObject *enabled = PyObject_CallObject(w->grad_enabled, NULL);
        if (enabled == NULL) {
            Py_CLEAR(out);
        } else {
            PyObject *t = enabled == Py_True ? first_tensor(w, out) : NULL;
            Py_DECREF(enabled);
            if (t != NULL) {
                Py_INCREF(t);
                Py_INCREF(where);
                Py_XSETREF(w->pending_tensor, t);
                Py_XSETREF(w->pending_where, where);
            }
        }
    }
    if (out != NULL && (flags & F_ENDS_STEP))
        w->ended = 1;
done:
    Py_XDECREF(where);
    Py_DECREF(info);
    return out;
}

/* ------------------------------------------------------------------ the cheap level's reading */

/* scan(t): True when host tensor t holds inf/NaN, False when not (or not floating), None when it is not
 * read here (on a device, not contiguous, a dtype of no kind): the caller asks torch. */
static PyObject *
w_scan(PyObject *self, PyObject *t)
{
    Watch *w = (Watch *)self;
    const void *data;
    Py_ssize_t n;
    int k;
    if (!is_tensor(w, t))
        Py_RETURN_NONE;
    k = dtype_kind(w, t);
    if (k == K_OTHER || !host_memory(t, &data, &n))
        Py_RETURN_NONE;
    if (!IS_FLOAT(k) || n == 0)
        Py_RETURN_FALSE;
    if (holds_nonfinite(data, n, k))
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

/* digest(t): the digest's values of a contiguous host tensor (digest_values), None when it is not read here. */
static PyObject *
w_digest(PyObject *self, PyObject *t)
{
    Watch *w = (Watch *)self;
    const void *data;
    Py_ssize_t n;
    int k;
    if (!is_tensor(w, t))
        Py_RETURN_NONE;
    k = dtype_kind(w, t);
    if (k == K_OTHER || !host_memory(t, &data, &n) || n == 0)
        Py_RETURN_NONE;
    return digest_values(data, n, k);
}

/* resolve(): the pending node gets its where now (before a backward pass the watch does not see start). */
static PyObject *
w_resolve(PyObject *self, PyObject *unused)
{
    Watch *w = (Watch *)self;
    if (w->pending_tensor != NULL)
        resolve_pending(w);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the type */

static int
w_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Watch *w = (Watch *)self;
    PyObject *session, *current_node, *grad_enabled, *file_kind, *user_kind, *tensor_type, *dtypes;
    int fast, k;
    if (!PyArg_ParseTuple(args, "OiOOOOOO", &session, &fast, &current_node, &grad_enabled, &file_kind, &user_kind,
                          &tensor_type, &dtypes))
        return -1;
    if (!PyTuple_Check(dtypes) || PyTuple_Size(dtypes) != K_COUNT) {
        PyErr_Format(PyExc_TypeError, "Watch: dtypes is a tuple of %d dtypes", (int)K_COUNT);
        return -1;
    }
#define SET(field, value) do { PyObject *v_ = (value); Py_XINCREF(v_); Py_XSETREF(w->field, v_); } while (0)
    SET(session, session);
    SET(current_node, current_node);
    SET(grad_enabled, grad_enabled);
    SET(file_kind, file_kind);
    SET(user_kind, user_kind);
    SET(tensor_type, tensor_type);
    for (k = 0; k < K_COUNT; k++)
        SET(dtypes[k], PyTuple_GetItem(dtypes, k));
#undef SET
    Py_XSETREF(w->infos, PyDict_New());
    Py_XSETREF(w->modules, PyList_New(0));
    Py_XSETREF(w->sum32, PyDict_New());
    if (w->sum32 == NULL || PyDict_SetItemString(w->sum32, "dtype", w->dtypes[K_F32]) < 0)
        return -1;
    if (w->infos == NULL || w->modules == NULL)
        return -1;
    w->fast = fast;
    w->checking = 1;
    w->busy = w->ended = 0;
    w->index = w->checked = 0;
    return 0;
}

static int
w_traverse(PyObject *self, visitproc visit, void *arg)
{
    Watch *w = (Watch *)self;
    int k;
    Py_VISIT(w->session);
    Py_VISIT(w->infos);
    Py_VISIT(w->modules);
    Py_VISIT(w->pending_tensor);
    Py_VISIT(w->pending_where);
    Py_VISIT(w->sink);
    Py_VISIT(w->producers);
    Py_VISIT(w->sum32);
    Py_VISIT(w->current_node);
    Py_VISIT(w->grad_enabled);
    Py_VISIT(w->file_kind);
    Py_VISIT(w->user_kind);
    Py_VISIT(w->tensor_type);
    Py_VISIT(w->node_hook);
    for (k = 0; k < K_COUNT; k++)
        Py_VISIT(w->dtypes[k]);
    if (python_minor >= 9)  /* heap types visit their type from 3.9 (bpo-40217) */
        Py_VISIT((PyObject *)Py_TYPE(self));
    return 0;
}

static int
w_clear(PyObject *self)
{
    Watch *w = (Watch *)self;
    int k;
    Py_CLEAR(w->session);
    Py_CLEAR(w->infos);
    Py_CLEAR(w->modules);
    Py_CLEAR(w->pending_tensor);
    Py_CLEAR(w->pending_where);
    Py_CLEAR(w->sink);
    Py_CLEAR(w->producers);
    Py_CLEAR(w->sum32);
    Py_CLEAR(w->current_node);
    Py_CLEAR(w->grad_enabled);
    Py_CLEAR(w->file_kind);
    Py_CLEAR(w->user_kind);
    Py_CLEAR(w->tensor_type);
    Py_CLEAR(w->node_hook);
    for (k = 0; k < K_COUNT; k++)
        Py_CLEAR(w->dtypes[k]);
    return 0;
}

static void
w_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    PyObject_GC_UnTrack(self);
    w_clear(self);
    free_slot(self);
    Py_DECREF(type);
}

static PyMethodDef w_methods[] = {
    {"__torch_dispatch__", (PyCFunction)w_dispatch, METH_VARARGS,
     "__torch_dispatch__(func, types, args, kwargs): run one operation and look at it (watch.py)."},
    {"scan", (PyCFunction)w_scan, METH_O, "scan(t): True/False whether host tensor t holds inf/NaN; None: ask torch."},
    {"digest", (PyCFunction)w_digest, METH_O, "digest(t): the digest's values of host tensor t; None: ask torch."},
    {"resolve", (PyCFunction)w_resolve, METH_NOARGS, "resolve(): the pending autograd node gets its where now."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef w_members[] = {
    {"session", T_OBJECT, offsetof(Watch, session), READONLY, NULL},
    {"infos", T_OBJECT, offsetof(Watch, infos), READONLY, NULL},
    {"modules", T_OBJECT, offsetof(Watch, modules), READONLY, NULL},
    {"pending_tensor", T_OBJECT, offsetof(Watch, pending_tensor), 0, NULL},
    {"pending_where", T_OBJECT, offsetof(Watch, pending_where), 0, NULL},
    {"sink", T_OBJECT, offsetof(Watch, sink), 0, NULL},
    {"producers", T_OBJECT, offsetof(Watch, producers), 0, NULL},
    {"index", T_LONGLONG, offsetof(Watch, index), 0, NULL},
    {"checked", T_LONGLONG, offsetof(Watch, checked), 0, NULL},
    {"checking", T_BOOL, offsetof(Watch, checking), 0, NULL},
    {"busy", T_BOOL, offsetof(Watch, busy), 0, NULL},
    {"ended", T_BOOL, offsetof(Watch, ended), 0, NULL},
    {"fast", T_INT, offsetof(Watch, fast), READONLY, NULL},
    {"node_hook", T_OBJECT, offsetof(Watch, node_hook), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot w_slots[] = {
    {Py_tp_init, (void *)w_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_dealloc, (void *)w_dealloc},
    {Py_tp_traverse, (void *)w_traverse},
    {Py_tp_clear, (void *)w_clear},
    {Py_tp_methods, w_methods},
    {Py_tp_members, w_members},
    {Py_tp_doc, (void *)"The accuracy mode's per-operation path (transfer/compare/watch.py)."},
    {0, NULL},
};

static PyType_Spec w_spec = {
    "transfer.compare._watch.Watch",
    sizeof(Watch),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    w_slots,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_watch", "The accuracy mode's per-operation path in C (watch.py).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__watch(void)
{
    PyObject *module, *type, *version;
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_sum, "sum");
    INTERN(s_flush, "flush");
    INTERN(s_learn, "learn");
    INTERN(s_slow, "slow");
    INTERN(s_after, "after");
    INTERN(s_grad_fn, "grad_fn");
    INTERN(s_metadata, "metadata");
    INTERN(s_co_filename, "co_filename");
    INTERN(s_f_back, "f_back");
    INTERN(s_f_code, "f_code");
    INTERN(s_dtype, "dtype");
    INTERN(s_is_cpu, "is_cpu");
    INTERN(s_is_contiguous, "is_contiguous");
    INTERN(s_numel, "numel");
    INTERN(s_data_ptr, "data_ptr");
    INTERN(s_shape, "shape");
    INTERN(s_stride, "stride");
    INTERN(s_forward, "forward");
    INTERN(s_backward, "backward");
    INTERN(s_empty, "");
    INTERN(s_unknown, "<unknown>");
    INTERN(s_key, "transfer.compare");
#undef INTERN
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL)
        return NULL;
    no_where = Py_BuildValue("(ss)", "<autograd engine>", "");
    if (no_where == NULL)
        return NULL;
    version = PySys_GetObject("version_info");  /* borrowed */
    python_minor = 8;
    if (version != NULL) {
        PyObject *minor = PySequence_GetItem(version, 1);
        if (minor != NULL) {
            python_minor = PyLong_AsLong(minor);
            Py_DECREF(minor);
        }
    }
    if (PyErr_Occurred())
        PyErr_Clear();
#ifndef _WIN32
    if (python_minor >= 9) {
        frame_get_back = (frame_fn)dlsym(RTLD_DEFAULT, "PyFrame_GetBack");
        frame_get_code = (frame_fn)dlsym(RTLD_DEFAULT, "PyFrame_GetCode");
        vectorcall_method = (vectorcall_method_t)dlsym(RTLD_DEFAULT, "PyObject_VectorcallMethod");
    }
#endif
    if (frame_get_back == NULL || frame_get_code == NULL)
        frame_get_back = frame_get_code = NULL;
    module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    type = PyType_FromSpec(&w_spec);
    if (type == NULL || PyModule_AddObject(module, "Watch", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
