#define _GNU_SOURCE
/* A journal file (*.journal) written out as its journal export, the text `journalctl --file=F -o
 * export` prints, for forensics.sources.journal.journal_native.
 *
 * Why: journalctl spends most of its time deciding, character by character, whether each field of
 * each entry is printable (the 1 M reference's three files: 9.7 CPU-s of journalctl, more than the
 * whole analysis of their export). Here the same decision is a byte test that only leaves its fast
 * path for bytes outside printable ASCII, and everything else is a copy.
 *
 * Only the ordinary is read here: a healthy file, entry after entry along its entry arrays. The
 * first thing that is not ordinary (an object out of place, a value journalctl would refuse or
 * repair, xz or lz4 compression, a flag this does not know) stops the reading and says where; the
 * caller has journalctl read the file and takes its export from the first byte not written here,
 * so what systemd judges is judged by systemd. The header is judged by systemd before this runs:
 * a file it refuses to open is journalctl's whole. journalctl steps from entry to entry by
 * searching the arrays for the next offset: the arrays are checked first to hold every entry once,
 * in order (where they do not, the two walks could part, and journalctl reads the whole file).
 * What is written is byte for byte journalctl's export (systemd 252's `output_export`):
 * `tests/sources/test_journal_file.py` and the fuzz target `journal_file` compare them.
 *
 * Format: https://systemd.io/JOURNAL_FILE_FORMAT/ and https://systemd.io/JOURNAL_EXPORT_FORMATS/
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(WITH_ZSTD)
#include <zstd.h>
#endif

/* The header (struct Header): offsets of the fields read. */
#define H_INCOMPATIBLE 12
#define H_SEQNUM_ID 72
#define H_HEADER_SIZE 88
#define H_N_ENTRIES 152
#define H_ENTRY_ARRAY 176
#define H_MIN_SIZE 208 /* up to n_data: every header written since 2013 (systemd 187) */
/* Incompatible flags. */
#define F_XZ 1u
#define F_LZ4 2u
#define F_KEYED_HASH 4u
#define F_ZSTD 8u
#define F_COMPACT 16u
#define F_KNOWN (F_XZ | F_LZ4 | F_KEYED_HASH | F_ZSTD | F_COMPACT)
/* Objects: a 16-byte header (type, flags, 6 reserved, le64 size), 8-byte aligned. */
#define OBJECT_HEADER 16
#define T_DATA 1
#define T_ENTRY 3
#define T_ENTRY_ARRAY 6
#define O_COMPRESSED_ZSTD 4
#define ENTRY_ITEMS 64       /* seqnum 16, realtime 24, monotonic 32, boot_id 40, xor_hash 56 */
#define ARRAY_ITEMS 24       /* next_entry_array_offset 16 */
#define DATA_PAYLOAD 64      /* entry_offset 40, n_entries 56; compact files add 8 bytes */
#define TIME_LIMIT (1ULL << 55) /* systemd's VALID_REALTIME / VALID_MONOTONIC */
/* An entry's export longer than this is left to journalctl, which streams it: written here it
   would be held whole in memory (a few bytes of zstd can claim hundreds of megabytes). */
#define ENTRY_LIMIT (64ULL << 20)

/* How write_entries ends. */
enum { FULL = 0, END = 1, STOP = 2, TOO_BIG = 3 };

static uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

typedef struct {
    const uint8_t *file;
    uint64_t size, header_size;
    uint32_t flags;
    uint64_t item_size, array_item_size, payload_at;
    char why[160];
    uint64_t why_at;
#if defined(WITH_ZSTD)
    ZSTD_DCtx *zstd;
#endif
    uint8_t *scratch; /* the last compressed field decompressed: the data object at unzipped_at */
    size_t scratch_cap;
    uint64_t unzipped_at, unzipped_len;
    char seqnum_id[32], boot_id[32]; /* in hex: the file's, and the last entry's (most entries share it) */
    uint8_t boot_bytes[16];
} File;

/* Output: bytes go to out[0:cap]; `at` counts on past cap so that an entry's whole size is known. */
typedef struct {
    uint8_t *out;
    uint64_t cap, at;
} Out;

static void put(Out *o, const void *bytes, uint64_t n)
{
    if (o->at + n <= o->cap)
        memcpy(o->out + o->at, bytes, n);
    o->at += n;
}

static void put_hex(Out *o, uint64_t v)
{
    char digits[16];
    int n = 0;
    do {
        digits[15 - n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    put(o, digits + 16 - n, n);
}

static void put_decimal(Out *o, uint64_t v)
{
    char digits[20];
    int n = 0;
    do {
        digits[19 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(o, digits + 20 - n, n);
}

static void hex_id(char *hex, const uint8_t *id)
{
    for (int i = 0; i < 16; i++) {
        hex[2 * i] = "0123456789abcdef"[id[i] >> 4];
        hex[2 * i + 1] = "0123456789abcdef"[id[i] & 15];
    }
}

static int stop(File *f, uint64_t at, const char *why)
{
    snprintf(f->why, sizeof f->why, "%s", why);
    f->why_at = at;
    return -1;
}

/* The object of `type` at `at`, its size checked to lie in the file; NULL (and why) if not. */
static const uint8_t *object_at(File *f, uint64_t at, int type, uint64_t *size)
{
    if (at % 8 || at < f->header_size || at > f->size - OBJECT_HEADER)
        return stop(f, at, "an object offset outside the file or not aligned"), NULL;
    const uint8_t *o = f->file + at;
    uint64_t n = le64(o + 8);
    if (o[0] != type)
        return stop(f, at, "an object of another type than its reference says"), NULL;
    if (n < OBJECT_HEADER || n > f->size - at)
        return stop(f, at, "an object whose size runs past the end of the file"), NULL;
    *size = n;
    return o;
}

/* systemd's journal_field_valid (protected names allowed): what journalctl writes unquestioned. */
static int field_name_valid(const uint8_t *p, uint64_t n)
{
    if (n == 0 || n > 64 || (p[0] >= '0' && p[0] <= '9'))
        return 0;
    for (uint64_t i = 0; i < n; i++)
        if (!((p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '_'))
            return 0;
    return 1;
}

/* systemd's utf8_is_printable_newline(p, n, false): valid UTF-8 of valid code points (no
 * surrogates, no non-characters), no C0 control but tab, no DEL or C1 control, no newline. */
static int printable(const uint8_t *p, uint64_t n)
{
    uint64_t i = 0;
    while (i < n) {
        if (n - i >= 8) { /* eight bytes at once: a flag for any byte below 0x20, from 0x7f, or above */
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (((w | (w + 0x0101010101010101ULL) | (w - 0x2020202020202020ULL)) & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        uint8_t c = p[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return 0;
            i++;
            continue;
        }
        uint64_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (len == 0 || len > n - i)
            return 0;
        uint32_t v = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
        for (uint64_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return 0;
            v = (v << 6) | (p[i + k] & 0x3f);
        }
        uint64_t shortest = v < 0x80 ? 1 : v < 0x800 ? 2 : v < 0x10000 ? 3 : 4;
        if (shortest != len || v >= 0x110000 || (v & 0xfffff800) == 0xd800 || (v >= 0xfdd0 && v <= 0xfdef)
            || (v & 0xfffe) == 0xfffe || (v >= 0x7f && v <= 0x9f))
            return 0;
        i += len;
    }
    return 1;
}

/* A data object's payload ("NAME=value"), decompressed if it is; NULL (and why) if it cannot be read here. */
static const uint8_t *payload_of(File *f, uint64_t at, uint64_t *n)
{
    uint64_t size;
    const uint8_t *o = object_at(f, at, T_DATA, &size);
    if (!o)
        return NULL;
    if (size <= f->payload_at) /* before any field past the object header is read */
        return stop(f, at, "a data object without payload"), NULL;
    uint64_t entry_offset = le64(o + 40), n_entries = le64(o + 56);
    if ((entry_offset == 0) != (n_entries == 0) || entry_offset % 8 || le64(o + 24) % 8 || le64(o + 32) % 8
        || le64(o + 48) % 8)
        return stop(f, at, "a data object with inconsistent references"), NULL;
    const uint8_t *payload = o + f->payload_at;
    uint64_t stored = size - f->payload_at;
    if (o[1] == 0) {
        *n = stored;
        return payload;
    }
#if defined(WITH_ZSTD)
    if (o[1] == O_COMPRESSED_ZSTD && (f->flags & F_ZSTD)) {
        if (at == f->unzipped_at) { /* the field the last item held, already decompressed */
            *n = f->unzipped_len;
            return f->scratch;
        }
        unsigned long long whole = ZSTD_getFrameContentSize(payload, stored);
        if (whole == ZSTD_CONTENTSIZE_UNKNOWN || whole == ZSTD_CONTENTSIZE_ERROR || whole == 0 || whole > ENTRY_LIMIT)
            return stop(f, at, "a compressed field of a size its frame does not say, none, or too long to hold"), NULL;
        if (whole > f->scratch_cap) {
            uint8_t *grown = realloc(f->scratch, whole ? whole : 1);
            if (!grown)
                return stop(f, at, "no memory for a compressed field"), NULL;
            f->scratch = grown;
            f->scratch_cap = whole;
        }
        if (!f->zstd && !(f->zstd = ZSTD_createDCtx()))
            return stop(f, at, "no memory for a decompressor"), NULL;
        f->unzipped_at = 0;
        size_t got = ZSTD_decompressDCtx(f->zstd, f->scratch, whole, payload, stored);
        if (ZSTD_isError(got) || got != whole)
            return stop(f, at, "a compressed field that does not decompress"), NULL;
        f->unzipped_at = at;
        f->unzipped_len = got;
        *n = got;
        return f->scratch;
    }
#endif
    return stop(f, at, "a field compressed in a way read only by journalctl"), NULL;
}

/* One entry's export at `at` into `o`; -1 (and why) at the first thing that is not ordinary. */
static int write_entry(File *f, uint64_t at, Out *o)
{
    uint64_t size;
    const uint8_t *e = object_at(f, at, T_ENTRY, &size);
    if (!e)
        return -1;
    if (size <= ENTRY_ITEMS || (size - ENTRY_ITEMS) % f->item_size)
        return stop(f, at, "an entry of a size that holds no whole items");
    uint64_t seqnum = le64(e + 16), realtime = le64(e + 24), monotonic = le64(e + 32), xor_hash = le64(e + 56);
    uint64_t start = o->at;
    if (seqnum == 0 || realtime == 0 || realtime >= TIME_LIMIT || monotonic >= TIME_LIMIT)
        return stop(f, at, "an entry with a sequence number or time systemd refuses");
    if (memcmp(f->boot_bytes, e + 40, 16) != 0) {
        memcpy(f->boot_bytes, e + 40, 16);
        hex_id(f->boot_id, e + 40);
    }
    put(o, "__CURSOR=s=", 11);
    put(o, f->seqnum_id, 32);
    put(o, ";i=", 3);
    put_hex(o, seqnum);
    put(o, ";b=", 3);
    put(o, f->boot_id, 32);
    put(o, ";m=", 3);
    put_hex(o, monotonic);
    put(o, ";t=", 3);
    put_hex(o, realtime);
    put(o, ";x=", 3);
    put_hex(o, xor_hash);
    put(o, "\n__REALTIME_TIMESTAMP=", 22);
    put_decimal(o, realtime);
    put(o, "\n__MONOTONIC_TIMESTAMP=", 23);
    put_decimal(o, monotonic);
    put(o, "\n_BOOT_ID=", 10);
    put(o, f->boot_id, 32);
    put(o, "\n", 1);
    uint64_t n_items = (size - ENTRY_ITEMS) / f->item_size;
    for (uint64_t i = 0; i < n_items; i++) {
        const uint8_t *item = e + ENTRY_ITEMS + i * f->item_size;
        uint64_t data_at = f->item_size == 4 ? le32(item) : le64(item), n;
        const uint8_t *data = payload_of(f, data_at, &n);
        if (!data)
            return -1;
        if (n > ENTRY_LIMIT)
            return stop(f, data_at, "an entry too long to hold");
        const uint8_t *equals = memchr(data, '=', n);
        if (!equals || !field_name_valid(data, (uint64_t)(equals - data)))
            return stop(f, data_at, "a field without a valid name");
        if (n >= 9 && memcmp(data, "_BOOT_ID=", 9) == 0)
            continue; /* journalctl writes the entry's own boot id above instead */
        if (printable(data, n)) {
            put(o, data, n);
        } else {
            uint64_t name = (uint64_t)(equals - data), length = n - name - 1;
            uint8_t little[8];
            for (int k = 0; k < 8; k++)
                little[k] = (uint8_t)(length >> (8 * k));
            put(o, data, name);
            put(o, "\n", 1);
            put(o, little, 8);
            put(o, equals + 1, length);
        }
        put(o, "\n", 1);
        if (o->at - start > ENTRY_LIMIT)
            return stop(f, at, "an entry too long to hold");
    }
    put(o, "\n", 1);
    return 0;
}

/* 0 when the entry array chain from `at` holds `n_entries` entries, at increasing offsets inside
 * the file, in arrays inside the file; -1 (and why) if not. */
static int arrays_in_order(File *f, uint64_t at, uint64_t n_entries)
{
    uint64_t seen = 0, last = 0;
    while (seen < n_entries) {
        uint64_t size;
        const uint8_t *a = object_at(f, at, T_ENTRY_ARRAY, &size);
        if (!a)
            return -1;
        if (size < ARRAY_ITEMS || (size - ARRAY_ITEMS) % f->array_item_size)
            return stop(f, at, "an entry array of a size that holds no whole items");
        uint64_t n_items = (size - ARRAY_ITEMS) / f->array_item_size, next = le64(a + 16);
        /* journalctl takes an array without items, or whose next one is not further on, for the
           end of the chain: arrays are appended, each with room for items */
        if (n_items == 0 || next % 8 || (next != 0 && next <= at))
            return stop(f, at, "an entry array without items, or whose next one is not further on");
        for (uint64_t i = 0; i < n_items && seen < n_entries; i++, seen++) {
            const uint8_t *item = a + ARRAY_ITEMS + i * f->array_item_size;
            uint64_t entry_at = f->array_item_size == 4 ? le32(item) : le64(item);
            if (entry_at <= last || entry_at % 8 || entry_at > f->size - ENTRY_ITEMS)
                return stop(f, at, "an entry array item out of order or outside the file");
            last = entry_at;
        }
        if (seen < n_entries && next == 0)
            return stop(f, at, "an entry array chain that ends before the header's count of entries");
        at = next;
    }
    return 0;
}

/* write_entries(file, array_at, index, done, last_entry, last_seqnum, out)
 *     -> (written, array_at, index, done, last_entry, last_seqnum, status, why, why_at)
 *
 * Whole entries of the journal file `file` (a buffer of all its bytes) as export text into the
 * writable buffer `out`, starting with item `index` of the entry array at `array_at` (0: the
 * file's first array), `done` entries having been written before, the last at byte `last_entry`
 * with sequence number `last_seqnum` (0, 0 before the first). Status FULL: `out` holds no more
 * whole entries, call again from the returned place; END: every entry is written; STOP: the
 * reading stopped before something not ordinary (`why`, at byte `why_at`); TOO_BIG: the next
 * entry alone needs `why_at` bytes. */
static PyObject *py_write_entries(PyObject *self, PyObject *args)
{
    Py_buffer file, out;
    unsigned long long array_at, index, done, last_entry, last_seqnum;
    if (!PyArg_ParseTuple(args, "y*KKKKKw*", &file, &array_at, &index, &done, &last_entry, &last_seqnum, &out))
        return NULL;
    File f = {.file = file.buf, .size = (uint64_t)file.len};
    Out o = {.out = out.buf, .cap = (uint64_t)out.len};
    int status = END;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *h = f.file;
    if (f.size < H_MIN_SIZE || memcmp(h, "LPKSHHRH", 8) != 0) {
        stop(&f, 0, "no journal header");
        status = STOP;
        goto ended;
    }
    f.flags = le32(h + H_INCOMPATIBLE);
    f.header_size = le64(h + H_HEADER_SIZE);
    if ((f.flags & ~F_KNOWN) || (f.flags & (F_XZ | F_LZ4))) {
        stop(&f, H_INCOMPATIBLE, "a journal compressed with xz or lz4, or with flags read only by journalctl");
        status = STOP;
        goto ended;
    }
#if !defined(WITH_ZSTD)
    if (f.flags & F_ZSTD) {
        stop(&f, H_INCOMPATIBLE, "a journal compressed with zstd (this build reads none)");
        status = STOP;
        goto ended;
    }
#endif
    if (f.header_size < H_MIN_SIZE || f.header_size > f.size || f.header_size % 8) {
        stop(&f, H_HEADER_SIZE, "a header size outside the file");
        status = STOP;
        goto ended;
    }
    int compact = (f.flags & F_COMPACT) != 0;
    hex_id(f.seqnum_id, h + H_SEQNUM_ID);
    hex_id(f.boot_id, f.boot_bytes); /* the all-zero id, matching boot_bytes as they start */
    f.item_size = compact ? 4 : 16;
    f.array_item_size = compact ? 4 : 8;
    f.payload_at = compact ? DATA_PAYLOAD + 8 : DATA_PAYLOAD;
    uint64_t n_entries = le64(h + H_N_ENTRIES);
    if (array_at == 0) {
        array_at = le64(h + H_ENTRY_ARRAY);
        if (arrays_in_order(&f, array_at, n_entries) < 0) {
            status = STOP;
            goto ended;
        }
    }
    while (done < n_entries) {
        uint64_t size;
        const uint8_t *a = object_at(&f, array_at, T_ENTRY_ARRAY, &size);
        if (!a || size < ARRAY_ITEMS || (size - ARRAY_ITEMS) % f.array_item_size) {
            if (a)
                stop(&f, array_at, "an entry array of a size that holds no whole items");
            status = STOP;
            break;
        }
        uint64_t n_items = (size - ARRAY_ITEMS) / f.array_item_size;
        if (index >= n_items) {
            uint64_t next = le64(a + 16);
            if (next <= array_at) { /* arrays are appended: a chain that turns back is damaged */
                stop(&f, array_at, "an entry array chain that ends before the header's count of entries");
                status = STOP;
                break;
            }
            array_at = next;
            index = 0;
            continue;
        }
        const uint8_t *item = a + ARRAY_ITEMS + index * f.array_item_size;
        uint64_t entry_at = compact ? le32(item) : le64(item);
        /* journalctl steps to entries further on in the file, of higher sequence numbers: where
           they are not, it skips or stops, as it judges */
        if (entry_at <= last_entry) {
            stop(&f, array_at, "an entry array item out of order");
            status = STOP;
            break;
        }
        uint64_t start = o.at;
        if (entry_at <= f.size - ENTRY_ITEMS && entry_at >= f.header_size && le64(f.file + entry_at + 16) <= last_seqnum) {
            stop(&f, entry_at, "an entry whose sequence number does not follow the last one's");
            status = STOP;
            break;
        }
        if (write_entry(&f, entry_at, &o) < 0) {
            o.at = start;
            status = STOP;
            break;
        }
        if (o.at > o.cap) {
            status = start == 0 ? TOO_BIG : FULL;
            f.why_at = o.at - start;
            o.at = start;
            break;
        }
        last_entry = entry_at;
        last_seqnum = le64(f.file + entry_at + 16);
        index++;
        done++;
    }
ended:
    Py_END_ALLOW_THREADS
#if defined(WITH_ZSTD)
    ZSTD_freeDCtx(f.zstd);
#endif
    free(f.scratch);
    PyBuffer_Release(&file);
    PyBuffer_Release(&out);
    return Py_BuildValue("KKKKKKisK", (unsigned long long)o.at, array_at, index, done, last_entry, last_seqnum,
                         status, status == STOP ? f.why : "", (unsigned long long)f.why_at);
}

static PyMethodDef methods[] = {
    {"write_entries", py_write_entries, METH_VARARGS, "Whole entries of a journal file as export text."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_journal_file",
    "A journal file written out as journalctl's export of it (see the source's header).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__journal_file(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "FULL", FULL) || PyModule_AddIntConstant(m, "END", END)
              || PyModule_AddIntConstant(m, "STOP", STOP) || PyModule_AddIntConstant(m, "TOO_BIG", TOO_BIG)
              || PyModule_AddIntConstant(m, "ZSTD", 0
#if defined(WITH_ZSTD)
                                                        + 1
#endif
                                         ))) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
