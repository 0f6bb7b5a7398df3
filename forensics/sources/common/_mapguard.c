#define _GNU_SOURCE
/* Guarding memory-mapped input files against shrinking under the reading, for
 * forensics.sources.common.rawio (plain inputs) and forensics.sources.journal.journal_native
 * (journal files).
 *
 * Why: a file another program truncates or rewrites while it is mapped (a bundle still being
 * copied, a log rotated by truncation) raises SIGBUS at the first read of a page past its new
 * end, and SIGBUS ends the whole process. As systemd's own journal reader does (sd-journal's
 * sigbus handling), a fault inside a guarded map has a page of zeros mapped in its place and is
 * noted; the reader carries on, and whoever reads the file asks afterwards whether it shrank
 * (`fault`), and says so instead of trusting what it read past that byte. A fault anywhere else
 * goes to whatever handled SIGBUS before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Maps guarded at once: past this a map is read unguarded, as before there was a guard. */
#define SLOTS 4096
#define TAKEN ((uintptr_t)1) /* a slot being filled in: no address is 1 */

static struct {
    _Atomic uintptr_t start, end; /* the map's bytes; start 0: a free slot */
    _Atomic uintptr_t fault;      /* the first fault's offset in the map, + 1 (0: none) */
} slots[SLOTS];
static struct sigaction before;
static uintptr_t page_size;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    const uintptr_t at = (uintptr_t)info->si_addr;
    if (info->si_code > 0) /* raised by a memory access, not sent by a program */
        for (int i = 0; i < SLOTS; i++) {
            const uintptr_t start = atomic_load(&slots[i].start), end = atomic_load(&slots[i].end);
            if (start <= TAKEN || at < start || at >= end)
                continue;
            if (mmap((void *)(at & ~(page_size - 1)), page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                     -1, 0) == MAP_FAILED)
                break;
            uintptr_t none = 0;
            atomic_compare_exchange_strong(&slots[i].fault, &none, at - start + 1);
            return; /* the access is retried, and reads zeros */
        }
    /* not a guarded map: the handling before ours, met as the access is retried */
    sigaction(SIGBUS, &before, NULL);
    (void)sig;
    (void)context;
}

/* Install on_sigbus unless it is SIGBUS's handler already (another library may have put its own
 * in since; the GIL is held, so threads do not race to install it). */
static int installed(void)
{
    struct sigaction now;
    if (sigaction(SIGBUS, NULL, &now) < 0)
        return -1;
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus)
        return 0;
    struct sigaction ours = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigemptyset(&ours.sa_mask);
    page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    return sigaction(SIGBUS, &ours, &before);
}

static int slot_of(PyObject *arg, Py_ssize_t *slot)
{
    *slot = PyLong_AsSsize_t(arg);
    if (*slot == -1 && PyErr_Occurred())
        return -1;
    if (*slot < 0 || *slot >= SLOTS || atomic_load(&slots[*slot].start) <= TAKEN) {
        PyErr_Format(PyExc_ValueError, "no map is guarded in slot %zd", *slot);
        return -1;
    }
    return 0;
}

/* guard(map) -> slot: guard the bytes of `map` (anything with a buffer) until release(slot); -1
 * when every slot is taken (the map is read unguarded). */
static PyObject *py_guard(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    /* the address only: a buffer held open would keep the map from being closed */
    const uintptr_t start = (uintptr_t)view.buf, end = start + (uintptr_t)view.len;
    PyBuffer_Release(&view);
    if (installed() < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (start <= TAKEN || end == start)
        return PyLong_FromLong(-1);
    for (int i = 0; i < SLOTS; i++) {
        uintptr_t free_slot = 0;
        if (atomic_compare_exchange_strong(&slots[i].start, &free_slot, TAKEN)) {
            atomic_store(&slots[i].fault, 0);
            atomic_store(&slots[i].end, end);
            atomic_store(&slots[i].start, start);
            return PyLong_FromLong(i);
        }
    }
    return PyLong_FromLong(-1);
}

/* fault(slot) -> the offset in the map of the first page that was gone when read, or -1. */
static PyObject *py_fault(PyObject *self, PyObject *arg)
{
    Py_ssize_t slot;
    if (slot_of(arg, &slot) < 0)
        return NULL;
    return PyLong_FromLongLong((long long)atomic_load(&slots[slot].fault) - 1);
}

/* release(slot) -> fault(slot), the slot freed for another map. */
static PyObject *py_release(PyObject *self, PyObject *arg)
{
    Py_ssize_t slot;
    if (slot_of(arg, &slot) < 0)
        return NULL;
    const long long fault = (long long)atomic_load(&slots[slot].fault) - 1;
    atomic_store(&slots[slot].end, 0);
    atomic_store(&slots[slot].start, 0);
    return PyLong_FromLongLong(fault);
}

static PyMethodDef methods[] = {
    {"guard", py_guard, METH_O, "Guard a mapped file's bytes against SIGBUS: its slot, or -1."},
    {"fault", py_fault, METH_O, "Where the guarded map was first found shrunk, or -1."},
    {"release", py_release, METH_O, "Stop guarding a map: where it was first found shrunk, or -1."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_mapguard",
    "Mapped input files guarded against shrinking under the reading (see the source's header).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__mapguard(void)
{
    return PyModule_Create(&module);
}
