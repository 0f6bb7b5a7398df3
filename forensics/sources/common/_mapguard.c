#define _GNU_SOURCE
/* Guarding memory-mapped input files against shrinking under the reading, for
 * forensics.sources.common.mapguard (its GuardedMap: plain inputs and journal files).
 *
 * Why: a file another program truncates while it is mapped (a bundle still being copied, a log
 * rotated by truncation) raises SIGBUS at the first read of a page past its new end, and SIGBUS
 * ends the whole process. As systemd's own journal reader does (sd-journal's sigbus handling), a
 * fault inside a guarded map has a page of zeros mapped in its place and is noted; the reader
 * carries on, and whoever reads the file asks afterwards whether it shrank (`fault`), and says so
 * instead of trusting what it read past that point.
 *
 * Only BUS_ADRERR inside a guarded map is taken (an access past the end of the mapped file; Linux
 * gives the same code for a page the disk or a network file system failed to read, which the
 * reader tells apart by the file's size). Any other SIGBUS (a fault elsewhere, a misaligned access,
 * one sent by `kill`) goes on to the handling there was before the first guard, called from here. The handler is installed once:
 * a SIGBUS handler installed after it (faulthandler.enable() later) comes first, and may end the
 * process on a guarded fault as before there was a guard.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Maps guarded at once: past this a map is read unguarded, as before there was a guard (a bundle
 * of more small inputs than this, held in memory at once). */
#define SLOTS 16384

/* A slot's fields are written between two steps of its generation (odd while they change), so that
 * the handler, which may interrupt a thread claiming or freeing any slot, reads a whole slot or
 * none (a seqlock). */
static struct {
    _Atomic uint64_t generation; /* even: the fields hold; odd: being written */
    _Atomic uint64_t token;      /* the map's own number (never reused), 0: a free slot */
    _Atomic uintptr_t start, end;
    _Atomic uintptr_t fault; /* the lowest page found gone: its offset in the map, + 1 (0: none) */
} slots[SLOTS];
static struct sigaction before;
static int installed;
static uintptr_t page_size;

/* SIGBUS as it would have been handled without the guard. */
static void pass_on(int sig, siginfo_t *info, void *context)
{
    /* sa_handler and sa_sigaction share their storage: SIG_DFL and SIG_IGN whatever the flags say */
    if (before.sa_handler == SIG_IGN && info->si_code <= 0)
        return; /* a sent SIGBUS that was ignored stays ignored (a fault cannot be) */
    if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
        if (before.sa_flags & SA_SIGINFO)
            before.sa_sigaction(sig, info, context);
        else
            before.sa_handler(sig);
        return;
    }
    /* the default: the process ends by this signal, a fault as the access is retried, a sent one
       as it is raised again (held until this handler returns) */
    struct sigaction default_action = {.sa_handler = SIG_DFL};
    sigemptyset(&default_action.sa_mask);
    sigaction(SIGBUS, &default_action, NULL);
    if (info->si_code <= 0)
        raise(SIGBUS);
}

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    const int saved_errno = errno;
    const uintptr_t at = (uintptr_t)info->si_addr;
    if (info->si_code == BUS_ADRERR)
        for (int i = 0; i < SLOTS; i++) {
            const uint64_t generation = atomic_load(&slots[i].generation);
            if (generation & 1)
                continue;
            const uint64_t token = atomic_load(&slots[i].token);
            const uintptr_t start = atomic_load(&slots[i].start), end = atomic_load(&slots[i].end);
            if (atomic_load(&slots[i].generation) != generation || !token || at < start || at >= end)
                continue;
            if (mmap((void *)(at & ~(page_size - 1)), page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                     -1, 0) == MAP_FAILED)
                break;
            /* the lowest page gone, whichever thread met it first */
            const uintptr_t page = ((at & ~(page_size - 1)) > start ? (at & ~(page_size - 1)) - start : 0) + 1;
            uintptr_t known = atomic_load(&slots[i].fault);
            while ((!known || page < known) && !atomic_compare_exchange_weak(&slots[i].fault, &known, page))
                ;
            errno = saved_errno;
            return; /* the access is retried, and reads zeros */
        }
    pass_on(sig, info, context);
    errno = saved_errno;
}

/* Install on_sigbus, once (the GIL is held: threads do not race to install it). */
static int install(void)
{
    if (installed)
        return 0;
    struct sigaction ours = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO};
    sigemptyset(&ours.sa_mask);
    page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (sigaction(SIGBUS, &ours, &before) < 0)
        return -1;
    installed = 1;
    return 0;
}

/* Read (slot, token) from `args`: 1 when the slot holds the map numbered `token`, 0 when it no
 * longer does, -1 with an exception set when the arguments are wrong. */
static int held_slot(PyObject *args, Py_ssize_t *slot)
{
    unsigned long long token;
    if (!PyArg_ParseTuple(args, "nK", slot, &token))
        return -1;
    return *slot >= 0 && *slot < SLOTS && token && atomic_load(&slots[*slot].token) == token;
}

/* guard(map, token) -> slot: guard the bytes of `map` (anything with a buffer), numbered `token`
 * (above 0, never reused), until release; -1 when every slot is taken (read unguarded). */
static PyObject *py_guard(PyObject *self, PyObject *args)
{
    PyObject *map;
    unsigned long long token;
    if (!PyArg_ParseTuple(args, "OK", &map, &token))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(map, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    /* the address only: a buffer held open would keep the map from being closed */
    const uintptr_t start = (uintptr_t)view.buf, end = start + (uintptr_t)view.len;
    PyBuffer_Release(&view);
    if (!token) {
        PyErr_SetString(PyExc_ValueError, "a map's token is above 0");
        return NULL;
    }
    if (install() < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (end == start)
        return PyLong_FromLong(-1);
    for (int i = 0; i < SLOTS; i++) {
        uint64_t generation = atomic_load(&slots[i].generation);
        if ((generation & 1) || atomic_load(&slots[i].token)
            || !atomic_compare_exchange_strong(&slots[i].generation, &generation, generation + 1))
            continue;
        if (atomic_load(&slots[i].token)) { /* taken between the look and the claim */
            atomic_store(&slots[i].generation, generation + 2);
            continue;
        }
        atomic_store(&slots[i].fault, 0);
        atomic_store(&slots[i].start, start);
        atomic_store(&slots[i].end, end);
        atomic_store(&slots[i].token, (uint64_t)token);
        atomic_store(&slots[i].generation, generation + 2);
        return PyLong_FromLong(i);
    }
    return PyLong_FromLong(-1);
}

/* fault(slot, token) -> the offset in the map of the lowest page found gone when read; -1 when none
 * was, or when the slot no longer holds that map. */
static PyObject *py_fault(PyObject *self, PyObject *args)
{
    Py_ssize_t slot;
    const int held = held_slot(args, &slot);
    if (held <= 0)
        return held < 0 ? NULL : PyLong_FromLong(-1);
    return PyLong_FromLongLong((long long)atomic_load(&slots[slot].fault) - 1);
}

/* release(slot, token) -> fault(slot, token), the slot freed for another map. Called before the
 * map is unmapped: a slot never guards memory given back. */
static PyObject *py_release(PyObject *self, PyObject *args)
{
    Py_ssize_t slot;
    const int held = held_slot(args, &slot);
    if (held <= 0)
        return held < 0 ? NULL : PyLong_FromLong(-1);
    const long long fault = (long long)atomic_load(&slots[slot].fault) - 1;
    const uint64_t generation = atomic_load(&slots[slot].generation);
    atomic_store(&slots[slot].generation, generation + 1);
    atomic_store(&slots[slot].token, 0);
    atomic_store(&slots[slot].start, 0);
    atomic_store(&slots[slot].end, 0);
    atomic_store(&slots[slot].generation, generation + 2);
    return PyLong_FromLongLong(fault);
}

static PyMethodDef methods[] = {
    {"guard", py_guard, METH_VARARGS, "Guard a mapped file's bytes against SIGBUS: its slot, or -1."},
    {"fault", py_fault, METH_VARARGS, "Where the guarded map was first found shrunk, or -1."},
    {"release", py_release, METH_VARARGS, "Stop guarding a map (before it is unmapped): fault(), then free."},
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
