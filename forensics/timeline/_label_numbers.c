/* The numbers of progress lines ("#running-req: 12, #token: 21600, token usage: 0.44, ..."), in C.
 *
 * Why C: read as one regular expression per field, the 19 fields of SGLang's batch lines cost
 * about 1 CPU-s at 1 M journal entries (372 k batch lines): the largest single piece of an
 * analysis. Every field is written the same way, `label: number`, so one pass over each line
 * finds every ": ", checks the label before it against the profile's labels (bucketed by their
 * last byte, longest first) and reads the number after it, while the line is in the CPU's cache.
 *
 * Reading rules (forensics.logs documents them for profile authors):
 * - a label counts where it starts the message or follows a punctuation mark and a space
 *   ("batch. #running-req: 12", ", #token: 21600", "] Avg prompt throughput: 0.0"), so that
 *   "token usage" is not read out of "swa token usage";
 * - the number is an optional '-', digits and at most one '.' ("20.00%" gives 20.0); anything
 *   else after the ": " leaves the field null;
 * - the first occurrence of a column's labels in a line wins.
 *
 * Input: a polars/Arrow StringView column as its buffers (views, optional validity, data
 * buffers). Output: one float64 block, column after column, NaN where a line has no such field.
 * The GIL is released while scanning.
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

/* label_numbers(views, validity, data_buffers, offset, n_rows, labels, n_columns) -> bytearray
 * labels: a list of (label bytes, column index). */
static PyObject *label_numbers(PyObject *self, PyObject *args)
{
    Py_buffer views, validity = {0};
    PyObject *validity_obj, *buffers_obj, *labels_obj;
    Py_ssize_t offset, n_rows, n_columns;
    if (!PyArg_ParseTuple(args, "y*OOnnOn", &views, &validity_obj, &buffers_obj, &offset, &n_rows, &labels_obj,
                          &n_columns))
        return NULL;
    PyObject *result = NULL;
    Py_buffer *data = NULL;
    Py_ssize_t n_data = 0;
    Labels *labels = calloc(1, sizeof *labels);
    if (!labels) {
        PyErr_NoMemory();
        goto done;
    }
    if (validity_obj != Py_None && PyObject_GetBuffer(validity_obj, &validity, PyBUF_SIMPLE) < 0)
        goto done;
    if (!PyList_Check(buffers_obj) || !PyList_Check(labels_obj)) {
        PyErr_SetString(PyExc_TypeError, "data buffers and labels must be lists");
        goto done;
    }
    if ((offset + n_rows) * 16 > views.len || n_rows < 0 || offset < 0 || n_columns < 0
        || (validity.buf && (offset + n_rows + 7) / 8 > validity.len)) {
        PyErr_SetString(PyExc_ValueError, "views or validity shorter than the rows");
        goto done;
    }
    n_data = PyList_GET_SIZE(buffers_obj);
    data = calloc((size_t)n_data + 1, sizeof *data);
    if (!data) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_data; i++)
        if (PyObject_GetBuffer(PyList_GET_ITEM(buffers_obj, i), &data[i], PyBUF_SIMPLE) < 0) {
            n_data = i;
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
    const unsigned char *bits = validity.buf;
    const unsigned char *view = (const unsigned char *)views.buf + offset * 16;
    int bad_view = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n_columns * n_rows; i++)
        out[i] = NAN;
    for (Py_ssize_t row = 0; row < n_rows; row++, view += 16) {
        Py_ssize_t bit = offset + row;
        if (bits && !(bits[bit >> 3] & (1 << (bit & 7))))
            continue;
        int32_t length;
        memcpy(&length, view, 4);
        const unsigned char *line;
        if (length <= 12) {
            line = view + 4;
        } else {
            int32_t index, start;
            memcpy(&index, view + 8, 4);
            memcpy(&start, view + 12, 4);
            if (index < 0 || index >= n_data || start < 0 || (Py_ssize_t)start + length > data[index].len) {
                bad_view = 1;
                break;
            }
            line = (const unsigned char *)data[index].buf + start;
        }
        if (length > 0)
            read_line(labels, line, length, out, n_rows, row);
    }
    Py_END_ALLOW_THREADS
    if (bad_view) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_ValueError, "a string view points outside its data buffer");
    }
done:
    for (Py_ssize_t i = 0; i < n_data; i++)
        PyBuffer_Release(&data[i]);
    free(data);
    free(labels);
    if (validity.buf)
        PyBuffer_Release(&validity);
    PyBuffer_Release(&views);
    return result;
}

static PyMethodDef methods[] = {
    {"label_numbers", label_numbers, METH_VARARGS,
     "label_numbers(views, validity, data_buffers, offset, n_rows, [(label, column)], n_columns) -> bytearray "
     "of float64, column after column, NaN where a line has no such field"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_label_numbers", NULL, -1, methods};

PyMODINIT_FUNC PyInit__label_numbers(void)
{
    c_numbers = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!c_numbers)
        return PyErr_NoMemory();
    return PyModule_Create(&module);
}
