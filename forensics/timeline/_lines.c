/* A log line's text read in C: the numbers of progress lines (`label_numbers`), and which lines
 * of a column are the same line (`distinct_lines`).
 *
 * label_numbers ("#running-req: 12, #token: 21600, token usage: 0.44, ..."). Why C: read as one
 * regular expression per field, the 19 fields of SGLang's batch lines cost about 1 CPU-s at 1 M
 * journal entries (372 k batch lines): the largest single piece of an analysis. Every field is
 * written the same way, `label: number`, so one pass over each line finds every ": ", checks the
 * label before it against the profile's labels (bucketed by their last byte, longest first) and
 * reads the number after it, while the line is in the CPU's cache.
 *
 * Reading rules (forensics.logs documents them for profile authors):
 * - a label counts where it starts the message or follows a punctuation mark and a space
 *   ("batch. #running-req: 12", ", #token: 21600", "] Avg prompt throughput: 0.0"), so that
 *   "token usage" is not read out of "swa token usage";
 * - the number is an optional '-', digits and at most one '.' ("20.00%" gives 20.0); anything
 *   else after the ": " leaves the field null;
 * - the first occurrence of a column's labels in a line wins.
 *
 * distinct_lines: each line's place among the column's distinct lines (in order of first
 * appearance), by a hash table whose every hit is checked byte for byte: exact, one pass. Why C:
 * polars' hash, first-distinct and dense rank over a million lines cost about 0.2 CPU-s, as much
 * as the profile's patterns save by reading each distinct line once.
 *
 * Input: a polars/Arrow StringView column as its buffers (views, optional validity, data
 * buffers). The GIL is released while scanning.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LABELS 256
#define MAX_NUMBER 63
/* distinct_lines: a table at most half full probes about 1.5 slots per row; this many per row on
 * average only a column crafted to share hashes reaches */
#define MAX_PROBES_PER_ROW 16

typedef struct {
    const char *text;
    Py_ssize_t length;
    Py_ssize_t column;
    uint32_t tail;  /* the last 4 bytes (labels of 4 bytes or more): most mismatches end here */
} Label;

typedef struct {
    Label labels[MAX_LABELS];
    Py_ssize_t n_labels;
    /* labels whose last byte is b: first[b] .. first[b] + count[b] in `order`, longest first */
    int order[MAX_LABELS];
    int first[256], count[256];
} Labels;

static locale_t c_numbers;  /* "C" numeric locale: '.' is the decimal point whatever Python set */

static int is_punctuation(unsigned char c)
{
    return c < 128 && c > ' ' && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
}

/* Whether a label may start at `at` of `line`: at the start, or after a punctuation mark and a space. */
static int starts_label(const unsigned char *line, Py_ssize_t at)
{
    if (at == 0)
        return 1;
    return line[at - 1] == ' ' && at >= 2 && is_punctuation(line[at - 2]);
}

static const double POWERS_OF_TEN[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                       1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The number at line[at:end] (see the rules above), or NaN. */
static double number_at(const unsigned char *line, Py_ssize_t at, Py_ssize_t end)
{
    char copy[MAX_NUMBER + 1];
    Py_ssize_t i = at, digits = 0, points = 0, decimals = 0;
    uint64_t mantissa = 0;
    int negative = i < end && line[i] == '-';
    if (negative)
        i++;
    for (; i < end; i++) {
        if (line[i] >= '0' && line[i] <= '9') {
            digits++;
            decimals += points;
            if (digits <= 19)
                mantissa = mantissa * 10 + (uint64_t)(line[i] - '0');
        } else if (line[i] == '.') {
            points++;
        } else {
            break;
        }
    }
    if (!digits || points > 1 || i - at > MAX_NUMBER)
        return NAN;
    /* Exact: the digits fit a double's mantissa and 10^decimals is exact, so one division rounds
     * correctly (what strtod gives, at a fraction of its cost). */
    if (digits <= 15 && decimals <= 22) {
        double value = (double)mantissa / POWERS_OF_TEN[decimals];
        return negative ? -value : value;
    }
    memcpy(copy, line + at, (size_t)(i - at));
    copy[i - at] = '\0';
    return strtod_l(copy, NULL, c_numbers);
}

static void read_line(const Labels *labels, const unsigned char *line, Py_ssize_t length, double *out,
                      Py_ssize_t n_rows, Py_ssize_t row)
{
    const unsigned char *colon = line;
    const unsigned char *end = line + length;
    while ((colon = memchr(colon, ':', (size_t)(end - colon))) != NULL) {
        Py_ssize_t at = colon - line;
        colon++;
        if (at == 0 || at + 1 >= length || line[at + 1] != ' ')
            continue;
        unsigned char last = line[at - 1];
        for (int k = labels->first[last]; k < labels->first[last] + labels->count[last]; k++) {
            const Label *label = &labels->labels[labels->order[k]];
            Py_ssize_t from = at - label->length;
            if (from < 0)
                continue;
            if (label->length >= 4) {
                uint32_t tail;
                memcpy(&tail, line + at - 4, 4);
                if (tail != label->tail)
                    continue;
            }
            if (memcmp(line + from, label->text, (size_t)label->length) != 0 || !starts_label(line, from))
                continue;
            double *cell = &out[label->column * n_rows + row];
            if (isnan(*cell))
                *cell = number_at(line, at + 2, length);
            break;
        }
    }
}

/* A StringView column as its buffers, held while it is read. */
typedef struct {
    Py_buffer views, validity;
    Py_buffer *data;
    Py_ssize_t n_data, offset, n_rows;
} Column;

static void close_column(Column *column)
{
    for (Py_ssize_t i = 0; i < column->n_data; i++)
        PyBuffer_Release(&column->data[i]);
    free(column->data);
    column->data = NULL;
    column->n_data = 0;
    if (column->validity.buf)
        PyBuffer_Release(&column->validity);
    if (column->views.buf)
        PyBuffer_Release(&column->views);
}

/* Hold the column's buffers; on failure (a Python error set) whatever was held is released. */
static int open_column(Column *column, PyObject *views_obj, PyObject *validity_obj, PyObject *buffers_obj,
                       Py_ssize_t offset, Py_ssize_t n_rows)
{
    memset(column, 0, sizeof *column);
    column->offset = offset;
    column->n_rows = n_rows;
    if (PyObject_GetBuffer(views_obj, &column->views, PyBUF_SIMPLE) < 0)
        return -1;
    if (validity_obj != Py_None && PyObject_GetBuffer(validity_obj, &column->validity, PyBUF_SIMPLE) < 0)
        goto failed;
    if (!PyList_Check(buffers_obj)) {
        PyErr_SetString(PyExc_TypeError, "data buffers must be a list");
        goto failed;
    }
    /* compared by division: no product of absurd arguments can overflow */
    if (n_rows < 0 || offset < 0 || offset > column->views.len / 16 || n_rows > column->views.len / 16 - offset
        || (column->validity.buf && (offset + n_rows + 7) / 8 > column->validity.len)) {
        PyErr_SetString(PyExc_ValueError, "views or validity shorter than the rows");
        goto failed;
    }
    Py_ssize_t n_data = PyList_GET_SIZE(buffers_obj);
    column->data = calloc((size_t)n_data + 1, sizeof *column->data);
    if (!column->data) {
        PyErr_NoMemory();
        goto failed;
    }
    for (Py_ssize_t i = 0; i < n_data; i++, column->n_data++)
        if (PyObject_GetBuffer(PyList_GET_ITEM(buffers_obj, i), &column->data[i], PyBUF_SIMPLE) < 0)
            goto failed;
    return 0;
failed:
    close_column(column);
    return -1;
}

/* Row `row`'s bytes: 1 with *line and *length set, 0 for a null row, -1 for a view that points
 * outside its data buffer. */
static int line_of(const Column *column, Py_ssize_t row, const unsigned char **line, int32_t *length)
{
    Py_ssize_t bit = column->offset + row;
    const unsigned char *bits = column->validity.buf;
    if (bits && !(bits[bit >> 3] & (1 << (bit & 7))))
        return 0;
    const unsigned char *view = (const unsigned char *)column->views.buf + bit * 16;
    memcpy(length, view, 4);
    if (*length <= 12) {
        *line = view + 4;
        return *length >= 0 ? 1 : -1;
    }
    int32_t index, start;
    memcpy(&index, view + 8, 4);
    memcpy(&start, view + 12, 4);
    if (index < 0 || index >= column->n_data || start < 0 || (Py_ssize_t)start + *length > column->data[index].len)
        return -1;
    *line = (const unsigned char *)column->data[index].buf + start;
    return 1;
}

/* label_numbers(views, validity, data_buffers, offset, n_rows, labels, n_columns) -> bytearray
 * labels: a list of (label bytes, column index). */
static PyObject *label_numbers(PyObject *self, PyObject *args)
{
    PyObject *views_obj, *validity_obj, *buffers_obj, *labels_obj;
    Py_ssize_t offset, n_rows, n_columns;
    if (!PyArg_ParseTuple(args, "OOOnnOn", &views_obj, &validity_obj, &buffers_obj, &offset, &n_rows, &labels_obj,
                          &n_columns))
        return NULL;
    if (!PyList_Check(labels_obj)) {
        PyErr_SetString(PyExc_TypeError, "labels must be a list");
        return NULL;
    }
    if (n_columns < 0 || n_columns > MAX_LABELS) {
        PyErr_Format(PyExc_ValueError, "n_columns must be between 0 and %d", MAX_LABELS);
        return NULL;
    }
    Column column;
    if (open_column(&column, views_obj, validity_obj, buffers_obj, offset, n_rows) < 0)
        return NULL;
    PyObject *result = NULL;
    Labels *labels = calloc(1, sizeof *labels);
    if (!labels) {
        PyErr_NoMemory();
        goto done;
    }
    labels->n_labels = PyList_GET_SIZE(labels_obj);
    if (labels->n_labels > MAX_LABELS) {
        PyErr_Format(PyExc_ValueError, "at most %d labels", MAX_LABELS);
        goto done;
    }
    for (Py_ssize_t i = 0; i < labels->n_labels; i++) {
        Label *label = &labels->labels[i];
        char *text;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(labels_obj, i), "y#n", &text, &label->length, &label->column))
            goto done;
        if (label->length < 1 || label->column < 0 || label->column >= n_columns) {
            PyErr_SetString(PyExc_ValueError, "a label must be non-empty and name a column");
            goto done;
        }
        label->text = text;  /* the bytes object stays alive in labels_obj */
        if (label->length >= 4)
            memcpy(&label->tail, text + label->length - 4, 4);
        labels->count[(unsigned char)text[label->length - 1]]++;
    }
    for (int b = 0, at = 0; b < 256; b++) {
        labels->first[b] = at;
        at += labels->count[b];
        labels->count[b] = 0;
    }
    for (int i = 0; i < labels->n_labels; i++) {  /* insertion by last byte, longest first within it */
        unsigned char b = (unsigned char)labels->labels[i].text[labels->labels[i].length - 1];
        int k = labels->first[b] + labels->count[b]++;
        while (k > labels->first[b] && labels->labels[labels->order[k - 1]].length < labels->labels[i].length) {
            labels->order[k] = labels->order[k - 1];
            k--;
        }
        labels->order[k] = i;
    }
    result = PyByteArray_FromStringAndSize(NULL, n_columns * n_rows * (Py_ssize_t)sizeof(double));
    if (!result)
        goto done;
    double *out = (double *)PyByteArray_AS_STRING(result);
    int bad_view = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n_columns * n_rows; i++)
        out[i] = NAN;
    for (Py_ssize_t row = 0; row < n_rows; row++) {
        const unsigned char *line;
        int32_t length;
        int found = line_of(&column, row, &line, &length);
        if (found < 0) {
            bad_view = 1;
            break;
        }
        if (found && length > 0)
            read_line(labels, line, length, out, n_rows, row);
    }
    Py_END_ALLOW_THREADS
    if (bad_view) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_ValueError, "a string view points outside its data buffer");
    }
done:
    free(labels);
    close_column(&column);
    return result;
}

/* A hash of a line's bytes, sixteen at a time, from a seed: spread enough for an open-addressing
 * table (every hit is compared byte for byte, so a shared hash costs a comparison, never a wrong
 * answer; a table flooded by lines sharing hashes gives up: see `distinct_lines`). */
static uint64_t line_hash(const unsigned char *line, int32_t length, uint64_t seed)
{
    /* two lanes of eight bytes each: neither waits for the other's multiplication */
    uint64_t one = seed ^ (uint64_t)(uint32_t)length, two = seed * 0x9E3779B97F4A7C15ULL;
    int32_t at = 0;
    for (; at + 16 <= length; at += 16) {
        uint64_t first, second;
        memcpy(&first, line + at, 8);
        memcpy(&second, line + at + 8, 8);
        one = (one ^ first) * 0xff51afd7ed558ccdULL;
        two = (two ^ second) * 0xc4ceb9fe1a85ec53ULL;
        one ^= one >> 29;
        two ^= two >> 31;
    }
    uint64_t rest[2] = {0, 0};
    memcpy(rest, line + at, (size_t)(length - at));
    one = (one ^ rest[0]) * 0xff51afd7ed558ccdULL;
    two = (two ^ rest[1]) * 0xc4ceb9fe1a85ec53ULL;
    /* a full finalizer (MurmurHash3's fmix64): every bit of both lanes reaches the slot's low bits,
     * so lines that differ only in their last bytes spread like any others */
    uint64_t hash = one ^ (two >> 33) ^ (two << 31);
    hash ^= hash >> 33;
    hash *= 0xff51afd7ed558ccdULL;
    hash ^= hash >> 33;
    hash *= 0xc4ceb9fe1a85ec53ULL;
    return hash ^ (hash >> 33);
}

typedef struct {
    uint32_t tag;      /* the hash's high half: most other lines in the slot are told apart here */
    int32_t distinct;  /* the distinct line's number, or -1 for an empty slot */
} Slot;

typedef struct {
    const unsigned char *text;
    int32_t length;
} Seen;

/* Rows hashed ahead of their lookup: their slots are asked of memory together, not one miss after
 * another (the table of a million lines is larger than the CPU's caches). */
#define AHEAD 16

/* distinct_lines(views, validity, data_buffers, offset, n_rows, seed) -> (place, first): bytearrays
 * of n_rows uint32 (each row's place among the distinct lines, in order of first appearance) and
 * of n_rows bytes (1 where a row is the first of its line). A null row reads as the empty line.
 * None when lines sharing hashes made the table's probes run past MAX_PROBES_PER_ROW per row (a
 * column crafted against the hash: the caller reads every row as its own instead). */
static PyObject *distinct_lines(PyObject *self, PyObject *args)
{
    PyObject *views_obj, *validity_obj, *buffers_obj;
    Py_ssize_t offset, n_rows;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOnnK", &views_obj, &validity_obj, &buffers_obj, &offset, &n_rows, &seed))
        return NULL;
    if (n_rows > (Py_ssize_t)INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "too many rows for one call");
        return NULL;
    }
    Column column;
    if (open_column(&column, views_obj, validity_obj, buffers_obj, offset, n_rows) < 0)
        return NULL;
    PyObject *place_obj = PyByteArray_FromStringAndSize(NULL, n_rows * (Py_ssize_t)sizeof(uint32_t));
    PyObject *first_obj = PyByteArray_FromStringAndSize(NULL, n_rows);
    PyObject *result = NULL;
    size_t slots = 16;
    while (slots < 2 * (size_t)n_rows)
        slots <<= 1;
    Slot *table = malloc(slots * sizeof *table);
    Seen *seen = malloc(((size_t)n_rows + 1) * sizeof *seen);  /* per distinct line */
    if (!place_obj || !first_obj || !table || !seen) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    uint32_t *place = (uint32_t *)PyByteArray_AS_STRING(place_obj);
    unsigned char *first = (unsigned char *)PyByteArray_AS_STRING(first_obj);
    int bad_view = 0, flooded = 0;
    Py_BEGIN_ALLOW_THREADS
    memset(table, 0xff, slots * sizeof *table);
    int32_t n_distinct = 0;
    size_t probes = 0, most_probes = MAX_PROBES_PER_ROW * (size_t)n_rows + 1024;
    for (Py_ssize_t start = 0; start < n_rows && !bad_view && !flooded; start += AHEAD) {
        const unsigned char *lines[AHEAD];
        int32_t lengths[AHEAD];
        uint64_t hashes[AHEAD];
        Py_ssize_t ahead = n_rows - start < AHEAD ? n_rows - start : AHEAD;
        for (Py_ssize_t k = 0; k < ahead; k++) {
            lines[k] = (const unsigned char *)"";
            lengths[k] = 0;
            if (line_of(&column, start + k, &lines[k], &lengths[k]) < 0) {
                bad_view = 1;
                break;
            }
            hashes[k] = line_hash(lines[k], lengths[k], seed);
            __builtin_prefetch(&table[hashes[k] & (slots - 1)]);
        }
        for (Py_ssize_t k = 0; k < ahead && !bad_view; k++) {
            Py_ssize_t row = start + k;
            uint32_t tag = (uint32_t)(hashes[k] >> 32);
            for (size_t slot = hashes[k] & (slots - 1);; slot = (slot + 1) & (slots - 1)) {
                if (++probes > most_probes) {
                    flooded = 1;
                    break;
                }
                Slot *at = &table[slot];
                if (at->distinct < 0) {
                    at->tag = tag;
                    at->distinct = n_distinct;
                    seen[n_distinct].text = lines[k];
                    seen[n_distinct].length = lengths[k];
                    place[row] = (uint32_t)n_distinct++;
                    first[row] = 1;
                    break;
                }
                const Seen *line = &seen[at->distinct];
                if (at->tag == tag && line->length == lengths[k]
                    && memcmp(line->text, lines[k], (size_t)lengths[k]) == 0) {
                    place[row] = (uint32_t)at->distinct;
                    first[row] = 0;
                    break;
                }
            }
            if (flooded)
                break;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad_view)
        PyErr_SetString(PyExc_ValueError, "a string view points outside its data buffer");
    else if (flooded)
        result = Py_NewRef(Py_None);
    else
        result = PyTuple_Pack(2, place_obj, first_obj);
done:
    Py_XDECREF(place_obj);
    Py_XDECREF(first_obj);
    free(table);
    free(seen);
    close_column(&column);
    return result;
}

static PyMethodDef methods[] = {
    {"label_numbers", label_numbers, METH_VARARGS,
     "label_numbers(views, validity, data_buffers, offset, n_rows, [(label, column)], n_columns) -> bytearray "
     "of float64, column after column, NaN where a line has no such field"},
    {"distinct_lines", distinct_lines, METH_VARARGS,
     "distinct_lines(views, validity, data_buffers, offset, n_rows, seed) -> (bytearray of uint32 places among "
     "the distinct lines in order of first appearance, bytearray of 1 where a row is its line's first), or None "
     "when lines sharing hashes flooded the table"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lines", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lines(void)
{
    c_numbers = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!c_numbers)
        return PyErr_NoMemory();
    return PyModule_Create(&module);
}
