/* The compiled executors' calls from C: hpccoll.runtime.entry's compiled form.
 *
 * A Bound is an executor's compiled function (a Numba C function, by address) bound to the
 * executor's state and handles and to what each buffer must be.  Called with the buffers
 * (send, recv, polls, tag), it makes the checks the executors' compiled code made on them
 * (NumPy arrays of the call's dtype, C-contiguous, the receive one writable, of the
 * validated sizes, at the bound addresses where there are, apart) and runs the function:
 * its code (done, in flight, failed...), or the mismatch code, having run nothing.
 * ``resume(polls, tag)`` runs on from where the last run left.  Every start, test and wait
 * of the compiled executors goes through one, so Python never dispatches the compiled code.
 *
 * An Entry serves the repeat of a blocking collective: armed with a validated call that runs
 * on a compiled executor (api.LastCall) -- a pattern of the arguments a repeat passes (per
 * argument the same object, an equal value of the same type, a NumPy array of the call's
 * dtype, a spec whose items after its array equal the armed ones, or anything: a buffer not
 * used) and the executor's Bound.  Called with the arguments, it returns False, having done
 * nothing, unless they match the pattern, the validated call is still cached, the executor
 * free and the Bound takes the arrays; then it has run the call and returns True: done, or
 * in flight and finished by the armed Python callable (the deadline, notices and failures
 * stay with the executors' Python code).  These are the checks api._again,
 * api.LastCall.repeat and hpccoll.Comm's readings make on the same call; the Python path
 * serves every call this one declines.  Armed for starts (a non-blocking call on the
 * compiled native executor), it draws the context's next tag slot, runs the Bound with no
 * polls and returns the request (a Started) that completes the run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

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

/* What an argument must be: the same object, an equal value of the same type, a NumPy array
 * of the call's dtype, a spec (list or tuple) of one whose other items equal the armed ones,
 * or anything. */
enum { SAME, EQUAL, ARRAY, SPEC, ANY };
#define MOST_ARGUMENTS 8

/* An executor's compiled function bound to its state: called with the buffers (or None), it
 * checks them as the executor's compiled checks do and runs (run), or runs on from where the
 * last run left (resume: the native executor's polls, the scheduled one's next steps).
 * Bound with no function (address 0), the call is one rank's, whose result is its send
 * buffer: copied (of the receive buffer's size, which the sizes bound make the send
 * buffer's), or nothing to do. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *state, *handles, *dtype;
    compiled_run run, resume;
    int64_t state_at, state_n, handles_at, handles_n, done, mismatch;
    Side sides[2];
    int64_t at[2];                      /* the buffers of the last run */
} Bound;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int armed;
    /* the pattern: per argument its kind, the value it is compared with (ARRAY: none; SPEC:
     * the items after the array), the buffer it gives (0 send, 1 receive, -1 none) */
    Py_ssize_t arguments;
    int kinds[MOST_ARGUMENTS], buffers[MOST_ARGUMENTS];
    PyObject *values[MOST_ARGUMENTS];
    /* what runs it: the validated call while `calls` holds it, on `executor` while it is not
     * busy, by `bound`; `finish(code, send, recv)` completes a run the function left in
     * flight */
    PyObject *calls, *prepared, *executor, *finish;
    Bound *bound;
    int64_t polls, tag;
    /* a non-blocking start's (request NULL: the entry of a blocking call): the context
     * whose tag slot it draws (`slots` of `tag_span` tags), the request type it returns,
     * made with the executor in flight (`pending`: the code of a run in flight) */
    PyObject *ctx, *request;
    int64_t pending, slots, tag_span;
} Entry;

static PyTypeObject BoundType;
static PyObject *ndarray_type, *dtype_name, *busy_name, *slot_name, *memory_name;

static void clear_call(Entry *self)
{
    Py_ssize_t i;
    self->armed = 0;
    for (i = 0; i < self->arguments; i++)
        Py_CLEAR(self->values[i]);
    self->arguments = 0;
    Py_CLEAR(self->calls); Py_CLEAR(self->prepared); Py_CLEAR(self->executor);
    Py_CLEAR(self->finish); Py_CLEAR(self->bound); Py_CLEAR(self->ctx);
    Py_CLEAR(self->request);
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

/* Whether `value` is a NumPy array of `dtype`. */
static int array_of(PyObject *dtype, PyObject *value)
{
    PyObject *its;
    if (Py_TYPE(value) != (PyTypeObject *)ndarray_type)
        return 0;
    its = PyObject_GetAttr(value, dtype_name);
    if (its == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(its);                     /* (the array holds it) */
    return its == dtype;
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

/* Run `self` on the buffers `given` (send, receive; NULL: none given): the function's code,
 * or mismatch (nothing run) where they are not as bound: NumPy arrays of the dtype, C
 * contiguous (the receive one writable), of the sizes bound, at the addresses bound (where
 * there are), apart.  A buffer not taken from the caller is the one bound; none given
 * stands for the one bound where there is one. */
static int64_t bound_run(Bound *self, PyObject *const given[2], int64_t polls, int64_t tag)
{
    Py_buffer views[2];
    int64_t at[2], code = self->mismatch;
    int held[2] = {0, 0}, side;
    for (side = 0; side < 2; side++) {
        const Side *wanted = &self->sides[side];
        at[side] = wanted->at;
        if (wanted->n < 0 || (given[side] == NULL && wanted->at != 0))
            continue;
        if (given[side] == NULL || !array_of(self->dtype, given[side]) ||
                take(given[side], wanted, &views[side]) < 0)
            goto release;
        held[side] = 1;
        at[side] = (int64_t)(intptr_t)views[side].buf;
    }
    if (held[0] && held[1] && views[0].len && views[1].len &&
            at[0] < at[1] + views[1].len && at[1] < at[0] + views[0].len)
        goto release;                   /* (overlapping buffers: validation refuses them) */
    if (self->run != NULL) {
        self->at[0] = at[0];
        self->at[1] = at[1];
        code = self->run(at[0], at[1], self->state_at, self->state_n, self->handles_at,
                         self->handles_n, polls, tag);
    } else {                            /* one rank's call: the send buffer copied, if any */
        if (held[0] && held[1])
            memcpy(views[1].buf, views[0].buf, (size_t)views[1].len);
        code = self->done;
    }
release:
    for (side = 0; side < 2; side++)
        if (held[side])
            PyBuffer_Release(&views[side]);
    return code;
}

static int read_int64(PyObject *value, int64_t *into)
{
    long long read = PyLong_AsLongLong(value);
    if (read == -1 && PyErr_Occurred())
        return -1;
    *into = (int64_t)read;
    return 0;
}

static PyObject *bound_call(PyObject *callable, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    Bound *self = (Bound *)callable;
    PyObject *given[2];
    int64_t polls, tag;
    if (kwnames != NULL || PyVectorcall_NARGS(nargsf) != 4) {
        PyErr_SetString(PyExc_TypeError, "a bound run takes (send, recv, polls, tag)");
        return NULL;
    }
    if (read_int64(args[2], &polls) < 0 || read_int64(args[3], &tag) < 0)
        return NULL;
    given[0] = args[0] == Py_None ? NULL : args[0];
    given[1] = args[1] == Py_None ? NULL : args[1];
    return PyLong_FromLongLong((long long)bound_run(self, given, polls, tag));
}

/* Run on from where the bound's last run left, `polls` polls (no function: done). */
static int64_t resume_run(Bound *bound, int64_t polls, int64_t tag)
{
    if (bound->resume == NULL)
        return bound->done;
    return bound->resume(bound->at[0], bound->at[1], bound->state_at, bound->state_n,
                         bound->handles_at, bound->handles_n, polls, tag);
}

static PyObject *bound_resume(Bound *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t polls, tag;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "resume takes (polls, tag)");
        return NULL;
    }
    if (read_int64(args[0], &polls) < 0 || read_int64(args[1], &tag) < 0)
        return NULL;
    return PyLong_FromLongLong((long long)resume_run(self, polls, tag));
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

/* The address and the number of elements of a writable C-contiguous array (held by the
 * caller). */
static int read_words(PyObject *array, int64_t *at, int64_t *n)
{
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return -1;
    *at = (int64_t)(intptr_t)view.buf;
    *n = (int64_t)(view.len / (view.itemsize ? view.itemsize : 1));
    PyBuffer_Release(&view);
    return 0;
}

static PyObject *bound_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Bound *self;
    PyObject *state, *handles, *dtype, *send_side, *recv_side;
    unsigned long long run, resume;
    long long done, mismatch;
    Side sides[2];
    int64_t state_at, state_n, handles_at, handles_n;
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Bound() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "KKOOOLLOO", &run, &resume, &state, &handles, &dtype, &done,
                          &mismatch, &send_side, &recv_side) ||
            read_side(send_side, &sides[0], 0) < 0 || read_side(recv_side, &sides[1], 1) < 0 ||
            read_words(state, &state_at, &state_n) < 0 ||
            read_words(handles, &handles_at, &handles_n) < 0)
        return NULL;
    self = (Bound *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = bound_call;
    Py_INCREF(state); Py_INCREF(handles); Py_INCREF(dtype);
    self->state = state; self->handles = handles; self->dtype = dtype;
    self->run = (compiled_run)(uintptr_t)run;
    self->resume = (compiled_run)(uintptr_t)resume;
    self->state_at = state_at; self->state_n = state_n;
    self->handles_at = handles_at; self->handles_n = handles_n;
    self->done = done; self->mismatch = mismatch;
    self->sides[0] = sides[0];
    self->sides[1] = sides[1];
    self->at[0] = sides[0].at;
    self->at[1] = sides[1].at;
    return (PyObject *)self;
}

static void bound_dealloc(Bound *self)
{
    Py_XDECREF(self->state); Py_XDECREF(self->handles); Py_XDECREF(self->dtype);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef bound_methods[] = {
    {"resume", (PyCFunction)(void (*)(void))bound_resume, METH_FASTCALL,
     "resume(polls, tag): run on from where the last run left; its code"},
    {NULL}
};

static PyTypeObject BoundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hpccoll.runtime._entry.Bound",
    .tp_doc = "Bound(run, resume, state, handles, dtype, done, mismatch, (send_n, send_at), "
              "(recv_n, recv_at)): an executor's compiled functions (addresses) bound to its "
              "state; called (send, recv, polls, tag) it checks the buffers and runs "
              "(see hpccoll.runtime.entry).",
    .tp_basicsize = sizeof(Bound),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Bound, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = bound_new,
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_methods = bound_methods,
};

/* Whether the call (args) is the armed one, its validated call still cached and its
 * executor free (-1: an error): its arrays then in `arrays`. */
static int served(Entry *self, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                  PyObject *arrays[2])
{
    PyObject *value, *busy;
    int free_now;
    Py_ssize_t i;

    if (!self->armed || kwnames != NULL || PyVectorcall_NARGS(nargsf) != self->arguments)
        return 0;
    for (i = 0; i < self->arguments; i++) {
        value = args[i];
        switch (self->kinds[i]) {
            case SAME:
                if (value != self->values[i])
                    return 0;
                continue;
            case EQUAL:
                if (value != self->values[i] && (Py_TYPE(value) != Py_TYPE(self->values[i]) ||
                                                 !same(value, self->values[i])))
                    return 0;
                continue;
            case ANY:
                continue;
            case SPEC:
                if ((value = spec_array(value, self->values[i])) == NULL)
                    return 0;
                /* fall through: its array */
            default:
                if (!array_of(self->bound->dtype, value))
                    return 0;
                arrays[self->buffers[i]] = value;
        }
    }
    switch (PySequence_Contains(self->calls, self->prepared)) {
        case 1: break;
        case 0: return 0;               /* (forgotten: validated anew) */
        default: return -1;
    }
    busy = PyObject_GetAttr(self->executor, busy_name);
    if (busy == NULL)
        return -1;
    free_now = busy == Py_False;
    Py_DECREF(busy);
    return free_now;
}

#define OR_NONE(array) ((array) ? (array) : Py_None)

/* A non-blocking start of the armed call on `arrays`: its request, or False (nothing sent,
 * no tag slot drawn) if the executor does not take them.  It draws the context's next tag
 * slot as ctx.next_slot() does (every rank starts in the same order). */
static PyObject *start_call(Entry *self, PyObject *arrays[2])
{
    PyObject *value, *memory, *run, *request;
    long long slot;
    int64_t next, tag, code;
    int failed;

    value = PyObject_GetAttr(self->ctx, slot_name);
    if (value == NULL)
        return NULL;
    slot = PyLong_AsLongLong(value);
    Py_DECREF(value);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    next = slot % (self->slots - 1) + 1;
    tag = self->tag + next * self->tag_span;
    code = bound_run(self->bound, arrays, 0, tag);
    if (code == self->bound->mismatch)
        Py_RETURN_FALSE;
    value = PyLong_FromLongLong(next);
    if (value == NULL)
        return NULL;
    failed = PyObject_SetAttr(self->ctx, slot_name, value);
    Py_DECREF(value);
    if (failed < 0)
        return NULL;
    if (code == self->bound->done)
        return PyObject_CallNoArgs(self->request);
    if (code == self->pending) {
        memory = PyTuple_Pack(2, OR_NONE(arrays[0]), OR_NONE(arrays[1]));
        if (memory == NULL)
            return NULL;
        failed = PyObject_SetAttr(self->executor, memory_name, memory);
        Py_DECREF(memory);
        if (failed < 0 || PyObject_SetAttr(self->executor, busy_name, Py_True) < 0)
            return NULL;
        return PyObject_CallFunction(self->request, "OOLL", self->executor, self->bound,
                                     (long long)self->pending, (long long)self->polls);
    }
    run = PyObject_CallFunction(self->finish, "LOOL", (long long)code, OR_NONE(arrays[0]),
                                OR_NONE(arrays[1]), (long long)tag);
    if (run == NULL)
        return NULL;
    request = PyObject_CallOneArg(self->request, run);
    Py_DECREF(run);
    return request;
}

static PyObject *entry_call(PyObject *callable, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    Entry *self = (Entry *)callable;
    PyObject *arrays[2] = {NULL, NULL}, *finished;
    int64_t code;

    switch (served(self, args, nargsf, kwnames, arrays)) {
        case 1: break;
        case 0: Py_RETURN_FALSE;
        default: return NULL;
    }
    if (self->request != NULL)
        return start_call(self, arrays);
    code = bound_run(self->bound, arrays, self->polls, self->tag);
    if (code == self->bound->done)
        Py_RETURN_TRUE;
    if (code == self->bound->mismatch)
        Py_RETURN_FALSE;
    finished = PyObject_CallFunction(self->finish, "LOO", (long long)code,
                                     OR_NONE(arrays[0]), OR_NONE(arrays[1]));
    if (finished == NULL)
        return NULL;
    Py_DECREF(finished);
    Py_RETURN_TRUE;
}

static PyObject *entry_arm(Entry *self, PyObject *args)
{
    PyObject *pattern, *calls, *prepared, *executor, *bound, *finish, *value;
    PyObject *ctx = NULL, *request = NULL;
    long long polls, tag, pending = 0, slots = 2, tag_span = 0;
    int kinds[MOST_ARGUMENTS], buffers[MOST_ARGUMENTS];
    PyObject *values[MOST_ARGUMENTS];
    Py_ssize_t i, n;
    if (!PyArg_ParseTuple(args, "O!(OOOO!OLL)|(OOLLL)", &PyTuple_Type, &pattern, &calls,
                          &prepared, &executor, &BoundType, &bound, &finish, &polls, &tag,
                          &ctx, &request, &pending, &slots, &tag_span))
        return NULL;
    if (slots < 2) {
        PyErr_SetString(PyExc_ValueError, "a context of at least 2 tag slots");
        return NULL;
    }
    n = PyTuple_GET_SIZE(pattern);
    if (n > MOST_ARGUMENTS) {
        PyErr_SetString(PyExc_ValueError, "a pattern of at most 8 arguments");
        return NULL;
    }
    for (i = 0; i < n; i++) {
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(pattern, i), "iOi", &kinds[i], &values[i],
                              &buffers[i]))
            return NULL;
        value = values[i];
        if (kinds[i] < SAME || kinds[i] > ANY ||
                ((kinds[i] == ARRAY || kinds[i] == SPEC) && buffers[i] != 0 && buffers[i] != 1) ||
                (kinds[i] == SPEC && !PyList_CheckExact(value) && !PyTuple_CheckExact(value))) {
            PyErr_SetString(PyExc_ValueError, "a pattern item is (kind, value, buffer): an "
                            "array's buffer 0 or 1, a spec's value a list or a tuple");
            return NULL;
        }
    }
    clear_call(self);
    for (i = 0; i < n; i++) {
        Py_INCREF(values[i]);
        self->values[i] = values[i];
        self->kinds[i] = kinds[i];
        self->buffers[i] = buffers[i];
    }
    self->arguments = n;
#define KEEP(field) (Py_INCREF(field), self->field = (field))
    KEEP(calls); KEEP(prepared); KEEP(executor); KEEP(finish);
#undef KEEP
    Py_INCREF(bound);
    self->bound = (Bound *)bound;
    self->polls = polls;
    self->tag = tag;
    Py_XINCREF(ctx);
    self->ctx = ctx;
    Py_XINCREF(request);
    self->request = request;
    self->pending = pending;
    self->slots = slots;
    self->tag_span = tag_span;
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
    Py_ssize_t i;
    for (i = 0; i < self->arguments; i++)
        Py_VISIT(self->values[i]);
    Py_VISIT(self->calls); Py_VISIT(self->prepared); Py_VISIT(self->executor);
    Py_VISIT(self->finish); Py_VISIT(self->bound); Py_VISIT(self->ctx);
    Py_VISIT(self->request);
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
     "arm(pattern, (calls, prepared, executor, bound, finish, polls, tag)[, (ctx, request, "
     "pending, slots, tag_span)]): serve repeats of this call (pattern: a (kind, value, "
     "buffer) per argument; kinds SAME, EQUAL, ARRAY, SPEC, ANY; bound: the executor's "
     "Bound); with the third, its non-blocking starts (returning request(...); finish(code, "
     "send, recv, tag): the run of a start neither done nor in flight)"},
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

/* A started collective: hpccoll.requests.Request's base.  `_operation` completes the run
 * (its test() and wait()), None once complete; a wait() or test() that raises ends the run
 * too.  Armed with an executor's run (arm(): a persistent request on the compiled native
 * executor, or one rank's copy), start() starts it from C while settings.fast and the
 * context is not revoked, and wait() and test() complete it from C while the run is clean
 * (done within its polls); anything else is Python's: start() calls self._start(), a
 * start's code other than done or in flight goes to executor.resume(code, send, recv, tag),
 * a wait's or test's to executor._finish(code) (the deadline, notices, failures).  A run
 * done at its start leaves hpccoll.runtime.progress.COMPLETED in `_operation`: the request
 * stays active until waited or tested, as MPI's persistent requests do. */
typedef struct {
    PyObject_HEAD
    PyObject *operation;
    Bound *bound;                       /* NULL: not armed */
    PyObject *executor, *memory, *ctx, *settings;
    int64_t pending, polls, tag;
} Started;

static PyObject *revoked_name, *fast_name, *overdue_name, *start_name,
    *wait_name, *test_name, *empty, *completed;

/* hpccoll.runtime.progress.COMPLETED (borrowed; taken at the first run done at its start:
 * importing it imports mpi4py's MPI, which importing this module must not). */
static PyObject *completed_run(void)
{
    PyObject *progress;
    if (completed == NULL) {
        progress = PyImport_ImportModule("hpccoll.runtime.progress");
        if (progress == NULL)
            return NULL;
        completed = PyObject_GetAttrString(progress, "COMPLETED");
        Py_DECREF(progress);
    }
    return completed;
}

/* The run on the executor is over: it is no longer busy and holds no memory. */
static int run_over(Started *self)
{
    Py_CLEAR(self->operation);
    if (PyObject_SetAttr(self->executor, busy_name, Py_False) < 0)
        return -1;
    return PyObject_SetAttr(self->executor, memory_name, empty);
}

/* Whether a start may run from C: settings.fast and the context not revoked (-1: error). */
static int may_start(Started *self)
{
    PyObject *value = PyObject_GetAttr(self->settings, fast_name);
    int fast;
    if (value == NULL)
        return -1;
    fast = value == Py_True;
    Py_DECREF(value);
    if (!fast)
        return 0;
    value = PyObject_GetAttr(self->ctx, revoked_name);
    if (value == NULL)
        return -1;
    fast = value == Py_None;
    Py_DECREF(value);
    return fast;
}

static PyObject *started_start(Started *self, PyObject *unused)
{
    PyObject *given[2], *run;
    int64_t code;
    int fast = 0;
    if (self->memory != NULL && (self->operation == NULL || self->operation == Py_None) &&
            (fast = may_start(self)) < 0)
        return NULL;
    if (!fast)
        return PyObject_CallMethodNoArgs((PyObject *)self, start_name);
    given[0] = PyTuple_GET_ITEM(self->memory, 0);
    given[1] = PyTuple_GET_ITEM(self->memory, 1);
    given[0] = given[0] == Py_None ? NULL : given[0];
    given[1] = given[1] == Py_None ? NULL : given[1];
    code = bound_run(self->bound, given, 0, self->tag);
    if (code == self->bound->done) {
        if ((run = completed_run()) == NULL)
            return NULL;
        Py_INCREF(run);
        Py_XSETREF(self->operation, run);
        Py_RETURN_NONE;
    }
    if (code == self->bound->mismatch)
        return PyObject_CallMethodNoArgs((PyObject *)self, start_name);
    if (code == self->pending) {
        if (PyObject_SetAttr(self->executor, memory_name, self->memory) < 0 ||
                PyObject_SetAttr(self->executor, busy_name, Py_True) < 0)
            return NULL;
        Py_INCREF(self->executor);
        Py_XSETREF(self->operation, self->executor);
        Py_RETURN_NONE;
    }
    run = PyObject_CallMethod(self->executor, "resume", "LOOL", (long long)code,
                              given[0] ? given[0] : Py_None, given[1] ? given[1] : Py_None,
                              (long long)self->tag);
    if (run == NULL)
        return NULL;
    Py_XSETREF(self->operation, run);
    Py_RETURN_NONE;
}

/* Finish the armed run in flight, which its resume left with `code`, in Python. */
static PyObject *finish_run(Started *self, int64_t code)
{
    PyObject *finished = PyObject_CallMethod(self->executor, "_finish", "L",
                                             (long long)code);
    Py_CLEAR(self->operation);
    return finished;
}

static PyObject *started_wait(Started *self, PyObject *unused)
{
    PyObject *operation = self->operation, *waited;
    int64_t code;
    if (operation == NULL || operation == Py_None)
        Py_RETURN_NONE;
    if (operation == completed) {
        Py_CLEAR(self->operation);
        Py_RETURN_NONE;
    }
    if (self->bound != NULL && operation == self->executor) {
        code = resume_run(self->bound, self->polls, self->tag);
        if (code == self->bound->done) {
            if (run_over(self) < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        waited = finish_run(self, code);
    } else {
        Py_INCREF(operation);
        waited = PyObject_CallMethodNoArgs(operation, wait_name);
        Py_DECREF(operation);
        Py_CLEAR(self->operation);
    }
    if (waited == NULL)
        return NULL;
    Py_DECREF(waited);
    Py_RETURN_NONE;
}

static PyObject *started_test(Started *self, PyObject *unused)
{
    PyObject *operation = self->operation, *result;
    int64_t code;
    int done;
    if (operation == NULL || operation == Py_None)
        Py_RETURN_TRUE;
    if (operation == completed) {
        Py_CLEAR(self->operation);
        Py_RETURN_TRUE;
    }
    if (self->bound != NULL && operation == self->executor) {
        code = resume_run(self->bound, 1, self->tag);
        if (code == self->bound->done) {
            if (run_over(self) < 0)
                return NULL;
            Py_RETURN_TRUE;
        }
        if (code == self->pending) {
            result = PyObject_CallMethodNoArgs(self->executor, overdue_name);
            if (result == NULL)
                return NULL;
            done = result == Py_True;
            Py_DECREF(result);
            if (!done)
                Py_RETURN_FALSE;
        }
        result = finish_run(self, code);
        if (result == NULL)
            return NULL;
        Py_DECREF(result);
        Py_RETURN_TRUE;
    }
    Py_INCREF(operation);
    result = PyObject_CallMethodNoArgs(operation, test_name);
    Py_DECREF(operation);
    done = result == NULL ? 1 : PyObject_IsTrue(result);
    Py_XDECREF(result);
    if (done)
        Py_CLEAR(self->operation);
    if (result == NULL || done < 0)
        return NULL;
    return PyBool_FromLong(done);
}

static void started_clear_run(Started *self)
{
    Py_CLEAR(self->bound); Py_CLEAR(self->executor); Py_CLEAR(self->memory);
    Py_CLEAR(self->ctx); Py_CLEAR(self->settings);
}

static PyObject *started_arm(Started *self, PyObject *args)
{
    PyObject *bound, *executor, *memory, *ctx, *settings;
    long long pending, polls, tag;
    if (!PyArg_ParseTuple(args, "O!OO!OOLLL", &BoundType, &bound, &executor, &PyTuple_Type,
                          &memory, &ctx, &settings, &pending, &polls, &tag))
        return NULL;
    if (PyTuple_GET_SIZE(memory) != 2) {
        PyErr_SetString(PyExc_ValueError, "memory is (send, recv)");
        return NULL;
    }
    started_clear_run(self);
#define KEEP(field) (Py_INCREF(field), self->field = (field))
    KEEP(executor); KEEP(memory); KEEP(ctx); KEEP(settings);
#undef KEEP
    Py_INCREF(bound);
    self->bound = (Bound *)bound;
    self->pending = pending;
    self->polls = polls;
    self->tag = tag;
    Py_RETURN_NONE;
}

static PyObject *started_disarm(Started *self, PyObject *unused)
{
    started_clear_run(self);
    Py_RETURN_NONE;
}

/* Started(operation=None, bound=None, pending=0, polls=0): `operation` in flight; where
 * `bound` is a Bound, `operation` is the executor it binds (a run of the compiled native
 * executor in flight), which wait() and test() then resume from C (wait() with `polls`;
 * `pending`: the code of a run still in flight). */
static int started_init(Started *self, PyObject *args, PyObject *kwargs)
{
    PyObject *operation = Py_None, *bound = Py_None;
    long long pending = 0, polls = 0;
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Started() takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "|OOLL", &operation, &bound, &pending, &polls))
        return -1;
    Py_INCREF(operation);
    Py_XSETREF(self->operation, operation);
    started_clear_run(self);
    if (Py_TYPE(bound) == &BoundType) {
        Py_INCREF(bound);
        self->bound = (Bound *)bound;
        Py_INCREF(operation);
        self->executor = operation;
        self->pending = pending;
        self->polls = polls;
    }
    return 0;
}

static int started_traverse(Started *self, visitproc visit, void *arg)
{
    Py_VISIT(self->operation); Py_VISIT(self->bound); Py_VISIT(self->executor);
    Py_VISIT(self->memory); Py_VISIT(self->ctx); Py_VISIT(self->settings);
    return 0;
}

static int started_clear(Started *self)
{
    Py_CLEAR(self->operation);
    started_clear_run(self);
    return 0;
}

static void started_dealloc(Started *self)
{
    PyObject_GC_UnTrack(self);
    started_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef started_methods[] = {
    {"_run_start", (PyCFunction)started_start, METH_NOARGS,
     "_run_start(): start the armed run from C, or call self._start() (a persistent "
     "request's start())"},
    {"wait", (PyCFunction)started_wait, METH_NOARGS, "complete the run"},
    {"test", (PyCFunction)started_test, METH_NOARGS,
     "make progress without blocking: whether the run is complete"},
    {"_arm", (PyCFunction)started_arm, METH_VARARGS,
     "_arm(bound, executor, (send, recv), ctx, settings, pending, polls, tag): start and "
     "complete runs of the executor from C (see hpccoll.runtime.entry)"},
    {"_disarm", (PyCFunction)started_disarm, METH_NOARGS, "start runs in Python only"},
    {NULL}
};

static PyMemberDef started_members[] = {
    {"_operation", T_OBJECT, offsetof(Started, operation), 0,
     "what completes the run in flight (None: none)"},
    {NULL}
};

static PyTypeObject StartedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hpccoll.runtime._entry.Started",
    .tp_doc = "Started(operation=None, bound=None, pending=0, polls=0): a started collective "
              "(hpccoll.requests.Request's base; see hpccoll.runtime.entry).",
    .tp_basicsize = sizeof(Started),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)started_init,
    .tp_dealloc = (destructor)started_dealloc,
    .tp_traverse = (traverseproc)started_traverse,
    .tp_clear = (inquiry)started_clear,
    .tp_methods = started_methods,
    .tp_members = started_members,
};

static struct PyModuleDef entry_module = {
    PyModuleDef_HEAD_INIT, "_entry",
    "The repeat of a blocking collective served from C (see hpccoll.runtime.entry).", -1,
};

PyMODINIT_FUNC PyInit__entry(void)
{
    PyObject *module, *numpy;
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&BoundType) < 0 ||
            PyType_Ready(&StartedType) < 0)
        return NULL;
    numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    ndarray_type = PyObject_GetAttrString(numpy, "ndarray");
    Py_DECREF(numpy);
    dtype_name = PyUnicode_InternFromString("dtype");
    busy_name = PyUnicode_InternFromString("busy");
    slot_name = PyUnicode_InternFromString("slot");
    revoked_name = PyUnicode_InternFromString("revoked");
    fast_name = PyUnicode_InternFromString("fast");
    memory_name = PyUnicode_InternFromString("memory");
    overdue_name = PyUnicode_InternFromString("overdue");
    start_name = PyUnicode_InternFromString("_start");
    wait_name = PyUnicode_InternFromString("wait");
    test_name = PyUnicode_InternFromString("test");
    empty = PyTuple_New(0);
    if (ndarray_type == NULL || dtype_name == NULL || busy_name == NULL ||
            revoked_name == NULL || fast_name == NULL || memory_name == NULL ||
            slot_name == NULL ||
            overdue_name == NULL ||
            start_name == NULL || wait_name == NULL || test_name == NULL || empty == NULL)
        return NULL;
    module = PyModule_Create(&entry_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&EntryType);
    Py_INCREF(&BoundType);
    Py_INCREF(&StartedType);
    if (PyModule_AddIntConstant(module, "SAME", SAME) < 0 ||
            PyModule_AddIntConstant(module, "EQUAL", EQUAL) < 0 ||
            PyModule_AddIntConstant(module, "ARRAY", ARRAY) < 0 ||
            PyModule_AddIntConstant(module, "SPEC", SPEC) < 0 ||
            PyModule_AddIntConstant(module, "ANY", ANY) < 0 ||
            PyModule_AddObject(module, "Entry", (PyObject *)&EntryType) < 0 ||
            PyModule_AddObject(module, "Bound", (PyObject *)&BoundType) < 0 ||
            PyModule_AddObject(module, "Started", (PyObject *)&StartedType) < 0) {
        Py_DECREF(&EntryType);
        Py_DECREF(&BoundType);
        Py_DECREF(&StartedType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
