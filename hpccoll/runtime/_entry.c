/* The repeat of a blocking collective served from C: hpccoll.runtime.entry's compiled form.
 *
 * An Entry is armed with a validated call that runs on a compiled executor (api.LastCall):
 * the arguments a repeat must match and what the executor needs to run it (the address of
 * its Numba C function, its state and handles, what each buffer must be).  Called as the
 * public function is (comm, sendbuf, recvbuf, counts, op, root, algorithm, options), it
 * returns False, having done nothing, unless the call is the armed one again -- the same
 * communicator, op and algorithm, equal root and counts, no options, the buffers NumPy arrays
 * (or specs whose items after the array equal the armed ones) of the armed dtype, C-contiguous,
 * the receive one writable, of the validated sizes, apart (or at the bound addresses), the
 * validated call still cached and the executor free -- in which case it runs the executor's
 * function and returns True: done, or in flight and then finished by the armed Python
 * callable (the deadline, notices and failures stay with the executors' Python code).
 * These are the checks api._again, api.LastCall.repeat and the executors' compiled checks
 * make on the same call (that Python path serves every call this one declines).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

typedef int64_t (*compiled_run)(int64_t send_at, int64_t recv_at, int64_t state_at,
                                int64_t state_n, int64_t handles_at, int64_t handles_n,
                                int64_t polls, int64_t tag);

/* One buffer of the call: taken from the caller (n >= 0 elements, at its own address when
 * at is 0, else only at that address) or not (n < 0: the executor is given at). */
typedef struct {
    Py_ssize_t n;
    int64_t at;
    int write;
} Side;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int armed;
    /* the call a repeat matches (no_send: the sendbuf of a call that sends no array of its
     * own, IN_PLACE or None; send_rest/recv_rest: a spec's items after its array, NULL for a
     * bare array) */
    PyObject *comm, *op, *root, *algorithm, *counts, *no_send, *send_rest, *recv_rest, *dtype;
    int sends_array, ignores_recv;
    /* what runs it: the validated call while `calls` holds it, on `executor` while it is not
     * busy; `finish(code, send, recv)` completes a run the function left in flight */
    PyObject *calls, *prepared, *executor, *state, *handles, *finish;
    compiled_run run;
    int64_t state_at, state_n, handles_at, handles_n, polls, tag, done, mismatch;
    Side send, recv;
} Entry;

static PyObject *ndarray_type, *dtype_name, *busy_name;

static void clear_call(Entry *self)
{
    self->armed = 0;
    Py_CLEAR(self->comm); Py_CLEAR(self->op); Py_CLEAR(self->root); Py_CLEAR(self->algorithm);
    Py_CLEAR(self->counts); Py_CLEAR(self->no_send); Py_CLEAR(self->send_rest);
    Py_CLEAR(self->recv_rest); Py_CLEAR(self->dtype); Py_CLEAR(self->calls);
    Py_CLEAR(self->prepared); Py_CLEAR(self->executor); Py_CLEAR(self->state);
    Py_CLEAR(self->handles); Py_CLEAR(self->finish);
}

/* Whether a and b are the same, or equal (an error comparing them: not equal). */
static int same(PyObject *a, PyObject *b)
{
    int equal;
    if (a == b)
        return 1;
    equal = PyObject_RichCompareBool(a, b, Py_EQ);
    if (equal < 0) {
        PyErr_Clear();
        return 0;
    }
    return equal;
}

/* The array of `buffer` if it is a spec like `rest` (a list or tuple as the armed one, its
 * items after the array equal to rest's), else NULL (borrowed). */
static PyObject *spec_array(PyObject *buffer, PyObject *rest)
{
    Py_ssize_t i, n = PySequence_Fast_GET_SIZE(rest);
    PyObject **items, **expected;
    if (Py_TYPE(buffer) != Py_TYPE(rest) || PySequence_Fast_GET_SIZE(buffer) != n + 1)
        return NULL;
    items = PySequence_Fast_ITEMS(buffer);
    expected = PySequence_Fast_ITEMS(rest);
    for (i = 0; i < n; i++)
        if (!same(items[i + 1], expected[i]))
            return NULL;
    return items[0];
}

/* `buffer` as the armed call's array (after its spec), or NULL (borrowed). */
static PyObject *armed_array(Entry *self, PyObject *buffer, PyObject *rest)
{
    PyObject *dtype;
    if (rest != NULL && (buffer = spec_array(buffer, rest)) == NULL)
        return NULL;
    if (Py_TYPE(buffer) != (PyTypeObject *)ndarray_type)
        return NULL;
    dtype = PyObject_GetAttr(buffer, dtype_name);
    if (dtype == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(dtype);                   /* (the array holds it) */
    return dtype == self->dtype ? buffer : NULL;
}

/* Take `array`'s memory for `side` into `view` (0), or decline it (-1, nothing held). */
static int take(PyObject *array, const Side *side, Py_buffer *view)
{
    int flags = PyBUF_C_CONTIGUOUS | (side->write ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(array, view, flags) < 0) {
        PyErr_Clear();                  /* (not C-contiguous, or read-only) */
        return -1;
    }
    if (view->len != side->n * view->itemsize ||
            (side->at != 0 && (int64_t)(intptr_t)view->buf != side->at)) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *entry_call(PyObject *callable, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    Entry *self = (Entry *)callable;
    PyObject *comm, *sendbuf, *recvbuf, *counts, *op, *root, *algorithm, *options;
    PyObject *send = NULL, *recv = NULL, *busy, *finished;
    Py_buffer send_view, recv_view;
    int64_t send_at, recv_at, code;
    int held_send = 0, held_recv = 0, free_now;

    if (kwnames != NULL || PyVectorcall_NARGS(nargsf) != 8) {
        PyErr_SetString(PyExc_TypeError, "Entry takes (comm, sendbuf, recvbuf, counts, op, "
                        "root, algorithm, options)");
        return NULL;
    }
    comm = args[0]; sendbuf = args[1]; recvbuf = args[2]; counts = args[3];
    op = args[4]; root = args[5]; algorithm = args[6]; options = args[7];
    if (!self->armed || comm != self->comm || op != self->op || options != Py_None ||
            !same(algorithm, self->algorithm) || !same(root, self->root) ||
            (counts != self->counts && (Py_TYPE(counts) != Py_TYPE(self->counts) ||
                                        !same(counts, self->counts))))
        Py_RETURN_FALSE;
    if (!self->sends_array) {
        if (sendbuf != self->no_send)
            Py_RETURN_FALSE;
    } else if ((send = armed_array(self, sendbuf, self->send_rest)) == NULL)
        Py_RETURN_FALSE;
    if (!self->ignores_recv && (recv = armed_array(self, recvbuf, self->recv_rest)) == NULL)
        Py_RETURN_FALSE;
    switch (PySequence_Contains(self->calls, self->prepared)) {
        case 1: break;
        case 0: Py_RETURN_FALSE;        /* (forgotten: validated anew) */
        default: return NULL;
    }
    busy = PyObject_GetAttr(self->executor, busy_name);
    if (busy == NULL)
        return NULL;
    free_now = busy == Py_False;
    Py_DECREF(busy);
    if (!free_now)
        Py_RETURN_FALSE;
    send_at = self->send.at;
    recv_at = self->recv.at;
    if (self->send.n >= 0 && send != NULL) {
        if (take(send, &self->send, &send_view) < 0)
            Py_RETURN_FALSE;
        held_send = 1;
        send_at = (int64_t)(intptr_t)send_view.buf;
    }
    if (self->recv.n >= 0 && recv != NULL) {
        if (take(recv, &self->recv, &recv_view) < 0) {
            if (held_send)
                PyBuffer_Release(&send_view);
            Py_RETURN_FALSE;
        }
        held_recv = 1;
        recv_at = (int64_t)(intptr_t)recv_view.buf;
    }
    if (held_send && held_recv && send_view.len && recv_view.len &&
            send_at < recv_at + recv_view.len && recv_at < send_at + send_view.len)
        code = self->mismatch;          /* (overlapping buffers: validation refuses them) */
    else
        code = self->run(send_at, recv_at, self->state_at, self->state_n, self->handles_at,
                         self->handles_n, self->polls, self->tag);
    if (held_send)
        PyBuffer_Release(&send_view);
    if (held_recv)
        PyBuffer_Release(&recv_view);
    if (code == self->done)
        Py_RETURN_TRUE;
    if (code == self->mismatch)
        Py_RETURN_FALSE;
    finished = PyObject_CallFunction(self->finish, "LOO", (long long)code,
                                     send ? send : Py_None, recv ? recv : Py_None);
    if (finished == NULL)
        return NULL;
    Py_DECREF(finished);
    Py_RETURN_TRUE;
}

static int read_side(PyObject *description, Side *side, int write)
{
    long long n, at;
    if (!PyArg_ParseTuple(description, "LL", &n, &at))
        return -1;
    side->n = (Py_ssize_t)n;
    side->at = (int64_t)at;
    side->write = write;
    return 0;
}

static PyObject *entry_arm(Entry *self, PyObject *args)
{
    PyObject *comm, *op, *root, *algorithm, *counts, *no_send, *send_rest, *recv_rest, *dtype;
    PyObject *calls, *prepared, *executor, *state, *handles, *finish, *send_side, *recv_side;
    int sends_array, ignores_recv;
    unsigned long long run;
    long long state_at, state_n, handles_at, handles_n, polls, tag, done, mismatch;
    Side send, recv;
    if (!PyArg_ParseTuple(args, "(OOOOOOOOOpp)(OOOOOOKLLLLLLLLOO)", &comm, &op, &root,
                          &algorithm, &counts, &no_send, &send_rest, &recv_rest, &dtype,
                          &sends_array, &ignores_recv, &calls, &prepared, &executor, &state, &handles,
                          &finish, &run, &state_at, &state_n, &handles_at, &handles_n,
                          &polls, &tag, &done, &mismatch, &send_side, &recv_side))
        return NULL;
    if ((send_rest != Py_None && !PyList_CheckExact(send_rest) && !PyTuple_CheckExact(send_rest))
            || (recv_rest != Py_None && !PyList_CheckExact(recv_rest) &&
                !PyTuple_CheckExact(recv_rest))) {
        PyErr_SetString(PyExc_TypeError, "a spec's rest is a list or a tuple");
        return NULL;
    }
    if (read_side(send_side, &send, 0) < 0 || read_side(recv_side, &recv, 1) < 0)
        return NULL;
    clear_call(self);
#define KEEP(field, value) (Py_INCREF(value), self->field = (value))
    KEEP(comm, comm); KEEP(op, op); KEEP(root, root); KEEP(algorithm, algorithm);
    KEEP(counts, counts); KEEP(no_send, no_send); KEEP(dtype, dtype); KEEP(calls, calls); KEEP(prepared, prepared);
    KEEP(executor, executor); KEEP(state, state); KEEP(handles, handles); KEEP(finish, finish);
#undef KEEP
    self->send_rest = send_rest == Py_None ? NULL : (Py_INCREF(send_rest), send_rest);
    self->recv_rest = recv_rest == Py_None ? NULL : (Py_INCREF(recv_rest), recv_rest);
    self->sends_array = sends_array;
    self->ignores_recv = ignores_recv;
    self->run = (compiled_run)(uintptr_t)run;
    self->state_at = state_at; self->state_n = state_n;
    self->handles_at = handles_at; self->handles_n = handles_n;
    self->polls = polls; self->tag = tag; self->done = done; self->mismatch = mismatch;
    self->send = send;
    self->recv = recv;
    self->armed = 1;
    Py_RETURN_NONE;
}

static PyObject *entry_disarm(Entry *self, PyObject *unused)
{
    clear_call(self);
    Py_RETURN_NONE;
}

static PyObject *entry_armed(Entry *self, void *unused)
{
    return PyBool_FromLong(self->armed);
}

static PyObject *entry_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Entry *self;
    if (PyTuple_GET_SIZE(args) || (kwargs && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "Entry() takes no arguments");
        return NULL;
    }
    self = (Entry *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->vectorcall = entry_call;
    return (PyObject *)self;
}

static int entry_traverse(Entry *self, visitproc visit, void *arg)
{
    Py_VISIT(self->comm); Py_VISIT(self->op); Py_VISIT(self->root); Py_VISIT(self->algorithm);
    Py_VISIT(self->counts); Py_VISIT(self->no_send); Py_VISIT(self->send_rest);
    Py_VISIT(self->recv_rest); Py_VISIT(self->dtype); Py_VISIT(self->calls);
    Py_VISIT(self->prepared); Py_VISIT(self->executor); Py_VISIT(self->state);
    Py_VISIT(self->handles); Py_VISIT(self->finish);
    return 0;
}

static int entry_clear(Entry *self)
{
    clear_call(self);
    return 0;
}

static void entry_dealloc(Entry *self)
{
    PyObject_GC_UnTrack(self);
    clear_call(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef entry_methods[] = {
    {"arm", (PyCFunction)entry_arm, METH_VARARGS,
     "arm((comm, op, root, algorithm, counts, no_send, send_rest, recv_rest, dtype, "
     "sends_array, ignores_recv), (calls, prepared, executor, state, handles, finish, run, state_at, "
     "state_n, handles_at, handles_n, polls, tag, done, mismatch, (send_n, send_at), "
     "(recv_n, recv_at))): serve repeats of this call"},
    {"disarm", (PyCFunction)entry_disarm, METH_NOARGS, "serve no call (release the armed one)"},
    {NULL}
};

static PyGetSetDef entry_getset[] = {
    {"armed", (getter)entry_armed, NULL, "whether a call is armed", NULL},
    {NULL}
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hpccoll.runtime._entry.Entry",
    .tp_doc = "A blocking collective's repeat, served from C (see hpccoll.runtime.entry).",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Entry, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = entry_new,
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_traverse = (traverseproc)entry_traverse,
    .tp_clear = (inquiry)entry_clear,
    .tp_methods = entry_methods,
    .tp_getset = entry_getset,
};

static struct PyModuleDef entry_module = {
    PyModuleDef_HEAD_INIT, "_entry",
    "The repeat of a blocking collective served from C (see hpccoll.runtime.entry).", -1,
};

PyMODINIT_FUNC PyInit__entry(void)
{
    PyObject *module, *numpy;
    if (PyType_Ready(&EntryType) < 0)
        return NULL;
    numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    ndarray_type = PyObject_GetAttrString(numpy, "ndarray");
    Py_DECREF(numpy);
    dtype_name = PyUnicode_InternFromString("dtype");
    busy_name = PyUnicode_InternFromString("busy");
    if (ndarray_type == NULL || dtype_name == NULL || busy_name == NULL)
        return NULL;
    module = PyModule_Create(&entry_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&EntryType);
    if (PyModule_AddObject(module, "Entry", (PyObject *)&EntryType) < 0) {
        Py_DECREF(&EntryType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
