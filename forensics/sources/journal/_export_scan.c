#define _GNU_SOURCE
/* The hot loop of forensics.sources.journal.journal_export, in C.
 *
 * Why C: the numpy version found newlines and '=' in one vectorised pass, but then spent most of
 * its time coding keys and gathering each field's values through index arrays (several passes
 * over arrays as long as the file has lines). Here one pass over a piece of an export (whole
 * entries) finds lines, fields, binary values and entries, codes each key (guessing it is the key
 * at the same place in the previous entry, as it almost always is) and, while the line is still in
 * the CPU's cache, appends its value to the field's Arrow BinaryView column: a view into the
 * piece, or a copy end to end in a buffer of the column's own ("dense"), checked for UTF-8 so that
 * polars needs no cast. (Building the columns one field at a time afterwards reread every value
 * from memory, and cost twice the scan.) The GIL is released meanwhile, so pieces parse on every
 * core; the buffers are handed to Arrow without a copy (`Block`).
 *
 * Everything that takes judgement stays in Python (journal_export.py): the wording of problems,
 * repeated fields, assembly into events. This returns facts: offsets, line numbers, codes.
 *
 * Format: https://systemd.io/JOURNAL_EXPORT_FORMATS/
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Problems found on a line (reported by kind; Python words them). */
enum { NO_EQUALS = 0, LENGTH_CUT = 1, RUNS_PAST = 2, NO_NEWLINE = 3, TOO_MANY_FIELDS = 4, TOO_MANY_NAMES = 5 };
/* journald writes no entry with more fields (ENTRY_FIELD_COUNT_MAX): beyond it an entry is forged
   or damaged, and its fields are not kept (a million distinct names would cost gigabytes). */
#define MAX_FIELDS 1024
/* Distinct field names one piece may hold, each a column with buffers of its own (mapped apart):
 * a piece of a hundred entries naming 1,000 fields each used up the process's 65,530 mappings.
 * journald and the programs it logs for write some hundreds; a field past this quarantines its entry
 * (as `fields.MAX_NAMES` for the other journal readers). */
#define MAX_NAMES 4096
/* What scan() ends with. */
enum { SCANNED = 0, OVERRUN = 1, NO_MEMORY = -1 };

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Vec;

/* Make room for item `index` in a growable array (*items holds *cap items of item_size bytes). */
static int make_room(void **items, Py_ssize_t *cap, size_t item_size, Py_ssize_t index)
{
    if (index < *cap)
        return 0;
    Py_ssize_t grown = *cap ? 2 * *cap : 16;
    while (grown <= index)
        grown *= 2;
    void *moved = realloc(*items, (size_t)grown * item_size);
    if (!moved)
        return -1;
    *items = moved;
    *cap = grown;
    return 0;
}

static int vec_push(Vec *x, int64_t a)
{
    if (make_room((void **)&x->v, &x->cap, sizeof *x->v, x->n) < 0)
        return -1;
    x->v[x->n++] = a;
    return 0;
}

static void vec_free(Vec *x)
{
    free(x->v);
    x->v = NULL;
    x->n = x->cap = 0;
}

/* A growable byte buffer (memory mapped: see grow_mapped), filled without the GIL. */
typedef struct {
    uint8_t *v;
    Py_ssize_t n, cap;
} Bytes;

/* Let go of a Bytes' memory. */
static void unmap(Bytes *b)
{
    if (b->v)
        munmap(b->v, (size_t)b->cap);
    b->v = NULL;
    b->n = b->cap = 0;
}

typedef struct {
    Py_ssize_t name_at, name_len; /* the name's bytes in the piece */
    uint64_t hash;
    int valid;                    /* a valid journal field name */
    int dense;                    /* copy long values into `data` (else views point into the piece) */
    int utf8;                     /* every first value so far is UTF-8 */
    int64_t last_entry;           /* the entry that last had this field (to spot repeats) */
    Bytes views;                  /* 16-byte BinaryView of each entry's first value (zero when absent) */
    Bytes present;                /* validity bitmap, one bit per entry */
    int64_t n_present;
    Bytes data;                   /* dense: the long values end to end (mapped: see grow_mapped) */
    Vec later;                    /* (entry, value start, value end) of repeated values within an entry */
    Vec bad;                      /* invalid names: (entry, line) of every occurrence */
    /* Coded keys (identifiers: few distinct values, each written many times) keep each distinct
       first value once, in a dictionary, and each entry's code into it: 4 bytes an entry instead
       of a 16-byte view and a copy, no UTF-8 check but of a new value, and polars gets a category
       without hashing every row's text again. */
    int coded;
    Bytes codes;                  /* uint32 code of each entry's first value (zero when absent) */
    Bytes values;                 /* BinaryView views of the distinct values, in order of first sight */
    Bytes value_data;             /* their long bytes, end to end */
    Py_ssize_t n_values;
    uint64_t *value_hashes;
    Py_ssize_t value_hashes_cap;
    int32_t *value_slots;         /* open addressing over the values: code + 1, 0 = empty */
    Py_ssize_t n_value_slots;
    int64_t last_code;            /* the code given last: runs of one value are the rule */
    /* The cursor key (journald's `s=;i=;b=;m=;t=;x=`, see parse_cursor) keeps a cursor in its
       six values, not its 100-odd bytes: the two ids coded into the dictionary above, the four
       numbers as uint64; only a value not in journald's exact form stays text (views above). */
    int cursor;
    Bytes ids[2];                 /* uint32 codes of s= and b= */
    Bytes numbers[4];             /* uint64 i=, m=, t=, x= (an integer key: its int64 value in numbers[0]) */
    Bytes parsed;                 /* bitmap: the entry's value is held in numbers (and ids) */
    int64_t last_id[2];           /* the codes s= and b= were given last */
    Bytes own;                    /* bitmap: the parsed cursor's b=, m=, t= are its entry's own fields */
    /* An integer key (a clock, a pid, a priority) keeps a value written as a plain decimal number
       as that number, not text; any other spelling stays text (views above), for Python to judge. */
    int integer;
} Key;

typedef struct {
    int64_t kind, entry, line, name_at, name_len;
    uint64_t size; /* as written: any 64-bit value */
    int64_t left;
} LineProblem;

typedef struct {
    const uint8_t *a;
    Py_ssize_t m;
    int dense_all;
    const char **dense_names; /* names whose values are copied dense whatever dense_all says */
    Py_ssize_t *dense_lens, n_dense;
    const char **coded_names; /* names whose values are coded (see Key.coded) */
    Py_ssize_t *coded_lens, n_coded;
    const char *cursor_name;  /* the key held as a cursor's values (see Key.cursor) */
    Py_ssize_t cursor_len;
    const char **int_names;   /* keys held as integers (see Key.integer) */
    Py_ssize_t *int_lens, n_int;
    Key *keys;
    Py_ssize_t n_keys, keys_cap;
    int32_t *slots; /* open addressing: key index + 1, 0 = empty */
    Py_ssize_t n_slots;
    int32_t *previous; /* the codes of the previous entry's fields, in order */
    Py_ssize_t previous_len, previous_cap;
    Vec entry_start, entry_end, entry_line;
    LineProblem *problems;
    Py_ssize_t n_problems, problems_cap;
    int closed; /* the piece ends with a blank line that closes its last entry */
    int64_t named_past; /* the last entry that named a field past MAX_NAMES (-1: none) */
} Scan;

static void scan_free(Scan *S)
{
    for (Py_ssize_t k = 0; k < S->n_keys; k++) {
        unmap(&S->keys[k].views);
        unmap(&S->keys[k].present);
        unmap(&S->keys[k].data);
        vec_free(&S->keys[k].later);
        vec_free(&S->keys[k].bad);
        unmap(&S->keys[k].codes);
        unmap(&S->keys[k].values);
        unmap(&S->keys[k].value_data);
        free(S->keys[k].value_hashes);
        free(S->keys[k].value_slots);
        for (int j = 0; j < 2; j++)
            unmap(&S->keys[k].ids[j]);
        for (int j = 0; j < 4; j++)
            unmap(&S->keys[k].numbers[j]);
        unmap(&S->keys[k].parsed);
        unmap(&S->keys[k].own);
    }
    free(S->keys);
    free(S->slots);
    free(S->previous);
    free(S->problems);
    vec_free(&S->entry_start);
    vec_free(&S->entry_end);
    vec_free(&S->entry_line);
}

static int valid_name(const uint8_t *s, Py_ssize_t n)
{
    if (n < 1 || n > 64 || !((s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
        return 0;
    for (Py_ssize_t i = 1; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

/* The hash of a key's name or a coded value, eight bytes a step (FNV-1a's byte a step cost more
 * than copying the value), seeded per process so that forged names or values cannot be made to
 * collide in advance. */
static uint64_t hash_seed;

static uint64_t hash_value(const uint8_t *s, Py_ssize_t n)
{
    uint64_t h = hash_seed ^ ((uint64_t)n * 0x9E3779B97F4A7C15ULL), word;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&word, s, 8);
        h = (h ^ word) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    word = 0;
    memcpy(&word, s, (size_t)n);
    h = (h ^ word) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

/* An open-addressing table (code + 1 per slot, 0 = empty) twice the size of *slots, holding the
 * `count` items whose hashes are `stride` bytes apart from `first_hash`; -1 when out of memory. */
static int grow_table(int32_t **slots, Py_ssize_t *n_slots, const uint64_t *first_hash, size_t stride,
                      Py_ssize_t count)
{
    Py_ssize_t n = *n_slots ? 2 * *n_slots : 256;
    int32_t *grown = calloc((size_t)n, sizeof *grown);
    if (!grown)
        return -1;
    for (Py_ssize_t k = 0; k < count; k++) {
        const uint64_t hash = *(const uint64_t *)((const char *)first_hash + (size_t)k * stride);
        Py_ssize_t i = (Py_ssize_t)(hash & (uint64_t)(n - 1));
        while (grown[i])
            i = (i + 1) & (n - 1);
        grown[i] = (int32_t)(k + 1);
    }
    free(*slots);
    *slots = grown;
    *n_slots = n;
    return 0;
}

static int grow_slots(Scan *S)
{
    return grow_table(&S->slots, &S->n_slots, S->keys ? &S->keys[0].hash : NULL, sizeof(Key), S->n_keys);
}

static int same_name(const Scan *S, const Key *key, Py_ssize_t at, Py_ssize_t len)
{
    return key->name_len == len && memcmp(S->a + key->name_at, S->a + at, (size_t)len) == 0;
}

/* Whether `name` (of `len` bytes) is one of `names`. */
static int named(const char **names, const Py_ssize_t *lens, Py_ssize_t n, const uint8_t *name, Py_ssize_t len)
{
    for (Py_ssize_t d = 0; d < n; d++)
        if (lens[d] == len && memcmp(names[d], name, (size_t)len) == 0)
            return 1;
    return 0;
}

/* The code of the key at [at, at+len), added if new; -1 when out of memory, -2 for a new name
 * past MAX_NAMES. */
static Py_ssize_t key_code(Scan *S, Py_ssize_t at, Py_ssize_t len, Py_ssize_t position)
{
    if (position < S->previous_len) {
        Py_ssize_t guess = S->previous[position];
        if (same_name(S, &S->keys[guess], at, len))
            return guess;
    }
    uint64_t h = hash_value(S->a + at, len);
    if (2 * (S->n_keys + 1) > S->n_slots && grow_slots(S) < 0)
        return -1;
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(S->n_slots - 1));
    while (S->slots[i]) {
        Key *key = &S->keys[S->slots[i] - 1];
        if (key->hash == h && same_name(S, key, at, len))
            return S->slots[i] - 1;
        i = (i + 1) & (S->n_slots - 1);
    }
    if (S->n_keys >= MAX_NAMES)
        return -2; /* a new name past the bound */
    if (make_room((void **)&S->keys, &S->keys_cap, sizeof *S->keys, S->n_keys) < 0)
        return -1;
    Key *key = &S->keys[S->n_keys];
    memset(key, 0, sizeof *key);
    key->name_at = at;
    key->name_len = len;
    key->hash = h;
    key->valid = valid_name(S->a + at, len);
    key->dense = S->dense_all || named(S->dense_names, S->dense_lens, S->n_dense, S->a + at, len);
    key->coded = key->valid && named(S->coded_names, S->coded_lens, S->n_coded, S->a + at, len);
    key->cursor = key->valid && !key->coded && S->cursor_len == len && memcmp(S->cursor_name, S->a + at, (size_t)len) == 0;
    key->integer = key->valid && !key->coded && !key->cursor && named(S->int_names, S->int_lens, S->n_int, S->a + at, len);
    key->utf8 = 1;
    key->last_entry = -1;
    key->last_code = key->last_id[0] = key->last_id[1] = -1;
    S->slots[i] = (int32_t)(S->n_keys + 1);
    return S->n_keys++;
}

static int valid_utf8(const uint8_t *s, Py_ssize_t n);
static void put_view(uint8_t *view, const uint8_t *value, int64_t len, int64_t offset);

/* Make `b` (memory mapped for it) hold at least `need` bytes, starting at `first` or more. Its
 * pages are populated in one call as it grows: a page fault per 4 KiB on first touch cost more
 * than copying the values in; growing moves the pages, never the bytes. */
static int grow_mapped(Bytes *b, Py_ssize_t need, Py_ssize_t first)
{
    const Py_ssize_t page = (Py_ssize_t)sysconf(_SC_PAGESIZE);
    Py_ssize_t cap = b->cap ? 2 * b->cap : (first > need ? first : need);
    if (cap < need)
        cap = need;
    cap = (cap + page - 1) / page * page;
    void *mapped;
    if (!b->v)
        mapped = mmap(NULL, (size_t)cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    else
        mapped = mremap(b->v, (size_t)b->cap, (size_t)cap, MREMAP_MAYMOVE);
    if (mapped == MAP_FAILED)
        return -1;
#ifdef MADV_POPULATE_WRITE
    if (b->v) /* best effort: without it the pages fault in one by one */
        madvise((uint8_t *)mapped + b->cap, (size_t)(cap - b->cap), MADV_POPULATE_WRITE);
#endif
    b->v = mapped;
    b->cap = cap;
    return 0;
}

/* Grow mapped `b` to `size` bytes, the new ones zero (as mapped memory is, until written); its
 * first mapping `first` bytes or more. */
static int zero_fill(Bytes *b, Py_ssize_t size, Py_ssize_t first)
{
    if (b->n >= size)
        return 0;
    if (size > b->cap && grow_mapped(b, size, first) < 0)
        return -1;
    b->n = size;
    return 0;
}

/* The bytes of coded `key`'s value `code` (their length in *len). */
static const uint8_t *value_bytes(const Key *key, Py_ssize_t code, Py_ssize_t *len)
{
    const uint8_t *view = key->values.v + 16 * code;
    uint32_t size, offset;
    memcpy(&size, view, 4);
    *len = size;
    if (size <= 12)
        return view + 4;
    memcpy(&offset, view + 12, 4);
    return key->value_data.v + offset;
}

static int same_value(const Key *key, Py_ssize_t code, const uint8_t *value, Py_ssize_t len)
{
    Py_ssize_t known_len;
    const uint8_t *known = value_bytes(key, code, &known_len);
    return known_len == len && memcmp(known, value, (size_t)len) == 0;
}

static int grow_value_slots(Key *key)
{
    return grow_table(&key->value_slots, &key->n_value_slots, key->value_hashes, sizeof(uint64_t), key->n_values);
}

/* The code of coded `key`'s value [value, value+len), added to its dictionary if new; -1 when
 * out of memory (or past 2^31 distinct values, which no piece of 2 GiB holds). */
static int64_t value_code(Key *key, const uint8_t *value, Py_ssize_t len)
{
    if (key->last_code >= 0 && same_value(key, key->last_code, value, len))
        return key->last_code;
    const uint64_t h = hash_value(value, len);
    if (2 * (key->n_values + 1) > key->n_value_slots && grow_value_slots(key) < 0)
        return -1;
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(key->n_value_slots - 1));
    while (key->value_slots[i]) {
        const Py_ssize_t code = key->value_slots[i] - 1;
        if (key->value_hashes[code] == h && same_value(key, code, value, len))
            return key->last_code = code;
        i = (i + 1) & (key->n_value_slots - 1);
    }
    const Py_ssize_t code = key->n_values;
    if (code >= INT32_MAX
        || make_room((void **)&key->value_hashes, &key->value_hashes_cap, sizeof *key->value_hashes, code) < 0
        || zero_fill(&key->values, 16 * code + 16, 4096) < 0)
        return -1;
    if (key->utf8 && !valid_utf8(value, len))
        key->utf8 = 0;
    int64_t offset = 0;
    if (len > 12) {
        if (key->value_data.n + len > key->value_data.cap
            && grow_mapped(&key->value_data, key->value_data.n + len, 4096) < 0)
            return -1;
        memcpy(key->value_data.v + key->value_data.n, value, (size_t)len);
        offset = key->value_data.n;
        key->value_data.n += len;
    }
    put_view(key->values.v + 16 * code, value, len, offset);
    key->value_hashes[code] = h;
    key->value_slots[i] = (int32_t)(code + 1);
    key->n_values++;
    return key->last_code = code;
}

/* Each byte's value as a lowercase hex digit, or -1 (filled in at module load): a cursor's hundred
 * digits are looked up, not compared in ranges. */
static int8_t hex_values[256];

static int hex_digit(uint8_t c)
{
    return hex_values[c];
}

/* `tag=` and 32 lowercase hex digits at *p (an sd_id128 as sd_id128_to_string writes it); *p moved past. */
static int cursor_id(const uint8_t **p, const uint8_t *end, uint8_t tag)
{
    const uint8_t *s = *p;
    if (end - s < 34 || s[0] != tag || s[1] != '=')
        return 0;
    for (int i = 2; i < 34; i++)
        if (hex_digit(s[i]) < 0)
            return 0;
    *p = s + 34;
    return 1;
}

/* `tag=` and a number as printf's %llx writes it (lowercase, no leading zero, at most 16 digits). */
static int cursor_number(const uint8_t **p, const uint8_t *end, uint8_t tag, uint64_t *out)
{
    const uint8_t *s = *p;
    if (end - s < 3 || s[0] != tag || s[1] != '=')
        return 0;
    s += 2;
    const uint8_t *first = s;
    uint64_t value = 0;
    int digit;
    while (s < end && (digit = hex_digit(*s)) >= 0) {
        if (s - first == 16)
            return 0;
        value = value << 4 | (uint64_t)digit;
        s++;
    }
    if (s == first || (*first == '0' && s - first > 1))
        return 0;
    *out = value;
    *p = s;
    return 1;
}

/* Whether `value` is a cursor exactly as journald writes one (sd_journal_get_cursor:
 * "s=%s;i=%llx;b=%s;m=%llx;t=%llx;x=%llx"): then its ids' places and its four numbers, from which
 * the same bytes are written back (anything else, even a cursor in another spelling, stays text). */
static int parse_cursor(const uint8_t *value, Py_ssize_t len, const uint8_t **s_id, const uint8_t **b_id,
                        uint64_t numbers[4])
{
    const uint8_t *p = value, *end = value + len;
    if (!cursor_id(&p, end, 's'))
        return 0;
    *s_id = p - 32;
    if (p == end || *p++ != ';' || !cursor_number(&p, end, 'i', &numbers[0]) || p == end || *p++ != ';'
        || !cursor_id(&p, end, 'b'))
        return 0;
    *b_id = p - 32;
    return p < end && *p++ == ';' && cursor_number(&p, end, 'm', &numbers[1])
           && p < end && *p++ == ';' && cursor_number(&p, end, 't', &numbers[2]) && p < end && *p++ == ';'
           && cursor_number(&p, end, 'x', &numbers[3]) && p == end;
}

/* Entry `entry`'s cursor (`value`) into the cursor key's values, if journald wrote it: 1 when held
 * so, 0 when it stays text, -1 when out of memory. */
static int add_cursor(Scan *S, Key *key, const uint8_t *value, Py_ssize_t len, int64_t entry)
{
    const uint8_t *ids[2];
    uint64_t numbers[4];
    if (!parse_cursor(value, len, &ids[0], &ids[1], numbers))
        return 0;
    if (zero_fill(&key->parsed, (entry >> 3) + 1, S->m / 1024) < 0)
        return -1;
    key->parsed.v[entry >> 3] |= (uint8_t)(1u << (entry & 7));
    for (int j = 0; j < 2; j++) {
        /* s= and b= share one dictionary: each is first compared with its own last value */
        key->last_code = key->last_id[j];
        const int64_t code = value_code(key, ids[j], 32);
        key->last_id[j] = code;
        if (code < 0 || zero_fill(&key->ids[j], 4 * entry + 4, S->m / 256) < 0)
            return -1;
        const uint32_t code32 = (uint32_t)code;
        memcpy(key->ids[j].v + 4 * entry, &code32, 4);
    }
    for (int j = 0; j < 4; j++) {
        if (zero_fill(&key->numbers[j], 8 * entry + 8, S->m / 128) < 0)
            return -1;
        memcpy(key->numbers[j].v + 8 * entry, &numbers[j], 8);
    }
    return 1;
}

/* A value written as `%lld` writes a number from 0 to 10^18 - 1 ("0", or no leading zero, no sign,
 * at most 18 digits): its number, which is written back as the same bytes; -1 for anything else. */
static int64_t plain_decimal(const uint8_t *value, Py_ssize_t len)
{
    if (len < 1 || len > 18 || (value[0] == '0' && len > 1))
        return -1;
    int64_t number = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        if (value[i] < '0' || value[i] > '9')
            return -1;
        number = number * 10 + (value[i] - '0');
    }
    return number;
}

/* Entry `entry`'s value of integer `key` held as its number if plainly written: 1 when held so, 0
 * when it stays text, -1 when out of memory. */
static int add_integer(Scan *S, Key *key, const uint8_t *value, Py_ssize_t len, int64_t entry)
{
    const int64_t number = plain_decimal(value, len);
    if (number < 0)
        return 0;
    if (zero_fill(&key->parsed, (entry >> 3) + 1, S->m / 1024) < 0 || zero_fill(&key->numbers[0], 8 * entry + 8, S->m / 128) < 0)
        return -1;
    key->parsed.v[entry >> 3] |= (uint8_t)(1u << (entry & 7));
    memcpy(key->numbers[0].v + 8 * entry, &number, 8);
    return 1;
}

static int add_problem(Scan *S, int64_t kind, int64_t entry, int64_t line, Py_ssize_t name_at, Py_ssize_t name_len,
                       uint64_t size, int64_t left);

static int add_field(Scan *S, Py_ssize_t key_at, Py_ssize_t key_len, Py_ssize_t value_at, Py_ssize_t value_end,
                     int64_t entry, int64_t line, Py_ssize_t position)
{
    Py_ssize_t code = key_code(S, key_at, key_len, position);
    if (code == -2) /* said once per entry: its entry is quarantined, the field not kept */
        return S->named_past == entry ? 0
             : (S->named_past = entry, add_problem(S, TOO_MANY_NAMES, entry, line, key_at, key_len, 0, 0));
    if (code < 0)
        return -1;
    if (make_room((void **)&S->previous, &S->previous_cap, sizeof *S->previous, position) < 0)
        return -1;
    S->previous[position] = (int32_t)code;
    if (position >= S->previous_len)
        S->previous_len = position + 1;
    Key *key = &S->keys[code];
    if (!key->valid)
        return vec_push(&key->bad, entry) | vec_push(&key->bad, line);
    if (key->last_entry == entry)
        return vec_push(&key->later, entry) | vec_push(&key->later, value_at) | vec_push(&key->later, value_end);
    key->last_entry = entry;
    const uint8_t *value = S->a + value_at;
    const Py_ssize_t len = value_end - value_at;
    if (key->cursor || key->integer) {
        const int held = key->cursor ? add_cursor(S, key, value, len, entry) : add_integer(S, key, value, len, entry);
        if (held)
            return held < 0 ? -1 : 0;
    }
    /* first guesses: an entry is some hundreds of bytes; 1 bit of it for presence */
    if (zero_fill(&key->present, (entry >> 3) + 1, S->m / 1024) < 0)
        return -1;
    key->present.v[entry >> 3] |= (uint8_t)(1u << (entry & 7));
    key->n_present++;
    if (key->coded) {
        const int64_t code = value_code(key, value, len);
        if (code < 0 || zero_fill(&key->codes, 4 * entry + 4, S->m / 256) < 0)
            return -1;
        const uint32_t code32 = (uint32_t)code;
        memcpy(key->codes.v + 4 * entry, &code32, 4);
        return 0;
    }
    if (key->utf8 && !valid_utf8(value, len))
        key->utf8 = 0;
    /* 16 bytes of an entry's some hundreds for its view */
    if (zero_fill(&key->views, 16 * entry + 16, S->m / 64) < 0)
        return -1;
    int64_t offset = value_at;
    if (key->dense && len > 12) {
        if (key->data.n + len > key->data.cap && grow_mapped(&key->data, key->data.n + len, S->m / 16) < 0)
            return -1;
        memcpy(key->data.v + key->data.n, value, (size_t)len);
        offset = key->data.n;
        key->data.n += len;
    }
    put_view(key->views.v + 16 * entry, value, len, offset);
    return 0;
}

static int add_problem(Scan *S, int64_t kind, int64_t entry, int64_t line, Py_ssize_t name_at, Py_ssize_t name_len,
                       uint64_t size, int64_t left)
{
    if (make_room((void **)&S->problems, &S->problems_cap, sizeof *S->problems, S->n_problems) < 0)
        return -1;
    S->problems[S->n_problems++] = (LineProblem){kind, entry, line, name_at, name_len, size, left};
    return 0;
}

/* Newlines in a[0:n]. With SSE2 (every x86-64), 16 bytes a step, counted in byte lanes that are
 * summed every 255 steps: a memchr per line cost 12 ns a line (0.16 s of CPU per million
 * journal entries, on the thread that hands out the pieces). */
#if defined(__SSE2__)
static Py_ssize_t count_newlines(const uint8_t *a, Py_ssize_t n)
{
    Py_ssize_t count = 0, i = 0;
    const __m128i newline = _mm_set1_epi8('\n'), zero = _mm_setzero_si128();
    while (n - i >= 16) {
        Py_ssize_t steps = (n - i) / 16;
        if (steps > 255)
            steps = 255;
        __m128i lanes = zero;
        for (Py_ssize_t s = 0; s < steps; s++, i += 16) /* a match is -1: subtracting it counts one */
            lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(a + i)), newline));
        const __m128i sums = _mm_sad_epu8(lanes, zero);
        count += _mm_cvtsi128_si32(sums) + _mm_extract_epi16(sums, 4);
    }
    for (; i < n; i++)
        count += a[i] == '\n';
    return count;
}
#else
static Py_ssize_t count_newlines(const uint8_t *a, Py_ssize_t n)
{
    Py_ssize_t count = 0;
    const uint8_t *end = a + n;
    while (a < end && (a = memchr(a, '\n', (size_t)(end - a))) != NULL) {
        count++;
        a++;
    }
    return count;
}
#endif

/* Lines are numbered as if every newline ended one (also those inside binary values), from 0. */
static int scan(Scan *S, int at_eof)
{
    const uint8_t *a = S->a;
    const Py_ssize_t m = S->m;
    Py_ssize_t p = 0, position = 0;
    int64_t line = 0, entry = -1;
    int opens = 1;           /* the next non-blank line opens an entry */
    int any_live = 0, last_live_blank = 0;
    S->closed = 0;
    while (p < m) {
        const uint8_t *newline = memchr(a + p, '\n', (size_t)(m - p));
        const Py_ssize_t s = p, e = newline ? newline - a : m;
        Py_ssize_t next = e + 1;
        int64_t next_line = line + 1;
        any_live = 1;
        if (s == e) {
            opens = last_live_blank = 1;
            S->closed = 1;
            p = next;
            line = next_line;
            continue;
        }
        last_live_blank = S->closed = 0;
        if (opens) {
            entry++;
            if (vec_push(&S->entry_start, s) | vec_push(&S->entry_end, e) | vec_push(&S->entry_line, line))
                return NO_MEMORY;
            opens = 0;
            position = 0;
        }
        S->entry_end.v[entry] = e;
        const uint8_t *equals = memchr(a + s, '=', (size_t)(e - s));
        if (equals) {
            if (position < MAX_FIELDS) {
                if (add_field(S, s, equals - a - s, equals - a + 1, e, entry, line, position) < 0)
                    return NO_MEMORY;
            } else if (position == MAX_FIELDS && add_problem(S, TOO_MANY_FIELDS, entry, line, s, 0, 0, 0) < 0)
                return NO_MEMORY;
            position++;
        } else if (!valid_name(a + s, e - s)) {
            if (add_problem(S, NO_EQUALS, entry, line, s, e - s, 0, 0) < 0)
                return NO_MEMORY;
        } else {
            /* a binary field: name, newline, 64-bit little-endian size, the bytes, newline */
            const Py_ssize_t size_at = e + 1;
            if (size_at + 8 > m) {
                if (!at_eof)
                    return OVERRUN;
                if (add_problem(S, LENGTH_CUT, entry, line, s, e - s, 0, 0) < 0)
                    return NO_MEMORY;
                return SCANNED; /* nothing after it can be read as lines */
            }
            uint64_t size = 0;
            for (int i = 7; i >= 0; i--)
                size = (size << 8) | a[size_at + i];
            const Py_ssize_t left = m - size_at - 8;
            if (size >= (uint64_t)left) {
                if (!at_eof)
                    return OVERRUN;
                if (add_problem(S, RUNS_PAST, entry, line, s, e - s, size, left) < 0)
                    return NO_MEMORY;
                return SCANNED; /* the declared value takes the rest of the file */
            } else if (a[size_at + 8 + (Py_ssize_t)size] != '\n') {
                /* The length is wrong: the entry is taken to end at the first blank line after the
                   declared value (a value may itself hold blank lines, so none is looked for before). */
                if (add_problem(S, NO_NEWLINE, entry, line, s, e - s, size, 0) < 0)
                    return NO_MEMORY;
                const Py_ssize_t from = size_at + 8 + (Py_ssize_t)size;
                const uint8_t *blank = memmem(a + from, (size_t)(m - from), "\n\n", 2);
                if (!blank) {
                    if (!at_eof)
                        return OVERRUN;
                    return SCANNED;
                }
                const Py_ssize_t q = blank - a;
                next_line = line + 1 + count_newlines(a + size_at, q + 1 - size_at);
                next = q + 1;
            } else {
                const Py_ssize_t value_end = size_at + 8 + (Py_ssize_t)size;
                if (position < MAX_FIELDS) {
                    if (add_field(S, s, e - s, size_at + 8, value_end, entry, line, position) < 0)
                        return NO_MEMORY;
                } else if (position == MAX_FIELDS && add_problem(S, TOO_MANY_FIELDS, entry, line, s, 0, 0, 0) < 0)
                    return NO_MEMORY;
                position++;
                next_line = line + 1 + count_newlines(a + size_at, value_end - size_at) + 1;
                next = value_end + 1;
            }
        }
        p = next;
        line = next_line;
    }
    if (!at_eof && (!any_live || !last_live_blank))
        return OVERRUN; /* the cut lies inside or at the end of a binary value: not between entries */
    return SCANNED;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as polars checks it. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (!(word & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        const uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t need;
        uint8_t low = 0x80, high = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                low = 0xA0;
            else if (c == 0xED)
                high = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                low = 0x90;
            else if (c == 0xF4)
                high = 0x8F;
        } else
            return 0;
        if (i + need >= n)
            return 0;
        if (s[i + 1] < low || s[i + 1] > high)
            return 0;
        for (Py_ssize_t j = 2; j <= need; j++)
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
        i += need + 1;
    }
    return 1;
}

static void put_view(uint8_t *view, const uint8_t *value, int64_t len, int64_t offset)
{
    uint32_t word = (uint32_t)len;
    memcpy(view, &word, 4);
    if (len <= 12) {
        memset(view + 4, 0, 12);
        memcpy(view + 4, value, (size_t)len);
    } else {
        memcpy(view + 4, value, 4);
        word = 0; /* the one data buffer */
        memcpy(view + 8, &word, 4);
        word = (uint32_t)offset;
        memcpy(view + 12, &word, 4);
    }
}

static PyObject *vec_bytes(const int64_t *v, Py_ssize_t n, Py_ssize_t stride, Py_ssize_t field)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (!out)
        return NULL;
    int64_t *w = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++)
        w[i] = v[i * stride + field];
    return out;
}

/* A malloc'd buffer handed to Python without a copy: exposes it through the buffer protocol
 * (so `pyarrow.py_buffer` wraps it) and frees it when the last reference goes. */
typedef struct {
    PyObject_HEAD
    uint8_t *data;
    Py_ssize_t size;
    Py_ssize_t mapped; /* bytes mapped with mmap (unmapped when it goes), or 0: malloc'd */
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    static uint8_t nothing;
    Block *block = (Block *)self;
    return PyBuffer_FillInfo(view, self, block->data ? block->data : &nothing, block->size, 1, flags);
}

static void block_dealloc(PyObject *self)
{
    Block *block = (Block *)self;
    if (block->mapped)
        munmap(block->data, (size_t)block->mapped);
    else
        free(block->data);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs block_buffer = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "forensics.sources.journal._export_scan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &block_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes made by the scanner, read through the buffer protocol.",
};

/* A Block of `b`'s first `size` bytes, taking over its memory. */
static PyObject *take_block(Bytes *b, Py_ssize_t size)
{
    Block *block = PyObject_New(Block, &BlockType);
    if (!block)
        return NULL;
    block->data = b->v;
    block->size = size;
    block->mapped = 0;
    b->v = NULL;
    b->n = b->cap = 0;
    return (PyObject *)block;
}

/* A Block of mapped `b`'s first `size` bytes, taking over its memory; the pages past them let go. */
static PyObject *take_mapped(Bytes *b, Py_ssize_t size)
{
    if (!b->v)
        return take_block(b, 0);
    const Py_ssize_t page = (Py_ssize_t)sysconf(_SC_PAGESIZE);
    const Py_ssize_t kept = size ? (size + page - 1) / page * page : page;
    if (kept < b->cap) {
        munmap(b->v + kept, (size_t)(b->cap - kept));
        b->cap = kept;
    }
    Block *block = PyObject_New(Block, &BlockType);
    if (!block)
        return NULL;
    block->data = b->v;
    block->size = size;
    block->mapped = b->cap;
    b->v = NULL;
    b->n = b->cap = 0;
    return (PyObject *)block;
}

/* The cursor key's values: (id views, id data, s codes, b codes, i, m, t, x, parsed bitmap, own
 * bitmap: see mark_own_cursors); an
 * integer key's: (int64 numbers, parsed bitmap); None for any other key. */
static PyObject *cursor_item(Key *key, Py_ssize_t n_entries)
{
    if (key->integer)
        return Py_BuildValue("(NN)", take_mapped(&key->numbers[0], 8 * n_entries),
                             take_mapped(&key->parsed, (n_entries + 7) / 8));
    if (!key->cursor)
        return Py_NewRef(Py_None);
    PyObject *parts[10];
    parts[0] = take_mapped(&key->values, 16 * key->n_values);
    parts[1] = take_mapped(&key->value_data, key->value_data.n);
    for (int j = 0; j < 2; j++)
        parts[2 + j] = take_mapped(&key->ids[j], 4 * n_entries);
    for (int j = 0; j < 4; j++)
        parts[4 + j] = take_mapped(&key->numbers[j], 8 * n_entries);
    parts[8] = take_mapped(&key->parsed, (n_entries + 7) / 8);
    parts[9] = take_mapped(&key->own, (n_entries + 7) / 8);
    PyObject *item = NULL;
    int whole = 1;
    for (int j = 0; j < 10; j++)
        whole &= parts[j] != NULL;
    if (whole)
        item = PyTuple_New(10);
    for (int j = 0; j < 10; j++) {
        if (item)
            PyTuple_SET_ITEM(item, j, parts[j]);
        else
            Py_XDECREF(parts[j]);
    }
    return item;
}

static PyObject *key_item(Scan *S, Key *key, Py_ssize_t n_entries)
{
    PyObject *views, *validity, *data, *codes, *later, *cursor, *item = NULL;
    if (key->valid && key->coded) {
        views = take_mapped(&key->values, 16 * key->n_values);
        data = take_mapped(&key->value_data, key->value_data.n);
        codes = take_mapped(&key->codes, 4 * n_entries);
    } else if (key->valid && (key->cursor || key->integer) && key->n_present == 0) {
        views = Py_NewRef(Py_None); /* no text at all (see finish_columns) */
        /* an empty buffer, not None, for a dense key: its repeated values are then copied too */
        data = key->dense ? take_mapped(&key->data, key->data.n) : Py_NewRef(Py_None);
        codes = Py_NewRef(Py_None);
    } else if (key->valid) {
        views = take_mapped(&key->views, 16 * n_entries);
        data = key->dense ? take_mapped(&key->data, key->data.n) : Py_NewRef(Py_None);
        codes = Py_NewRef(Py_None);
    } else {
        views = Py_NewRef(Py_None);
        data = Py_NewRef(Py_None);
        codes = Py_NewRef(Py_None);
    }
    validity = key->valid && key->n_present < n_entries && views != Py_None ? take_mapped(&key->present, (n_entries + 7) / 8)
                                                          : Py_NewRef(Py_None);
    if (key->later.n) {
        Py_ssize_t n = key->later.n / 3;
        later = Py_BuildValue("(NNN)", vec_bytes(key->later.v, n, 3, 0), vec_bytes(key->later.v, n, 3, 1),
                              vec_bytes(key->later.v, n, 3, 2));
    } else
        later = Py_NewRef(Py_None);
    cursor = cursor_item(key, n_entries);
    if (views && validity && data && codes && later && cursor)
        item = Py_BuildValue("(y#OOOOOOOO)", (const char *)S->a + key->name_at, key->name_len,
                             key->valid ? Py_True : Py_False, key->utf8 ? Py_True : Py_False, views, validity,
                             data, later, codes, cursor);
    Py_XDECREF(cursor);
    Py_XDECREF(views);
    Py_XDECREF(validity);
    Py_XDECREF(data);
    Py_XDECREF(codes);
    Py_XDECREF(later);
    return item;
}

static PyObject *build_result(Scan *S, PyObject *excerpts)
{
    const Py_ssize_t n_entries = S->entry_start.n;
    PyObject *keys = PyList_New(S->n_keys), *problems = PyList_New(S->n_problems), *bad = PyList_New(0);
    if (!keys || !problems || !bad)
        goto fail;
    for (Py_ssize_t k = 0; k < S->n_keys; k++) {
        Key *key = &S->keys[k];
        for (Py_ssize_t i = 0; i < key->bad.n; i += 2) {
            PyObject *item = Py_BuildValue("(nLL)", k, (long long)key->bad.v[i], (long long)key->bad.v[i + 1]);
            if (!item || PyList_Append(bad, item) < 0) {
                Py_XDECREF(item);
                goto fail;
            }
            Py_DECREF(item);
        }
        PyObject *item = key_item(S, key, n_entries);
        if (!item)
            goto fail;
        PyList_SET_ITEM(keys, k, item);
    }
    for (Py_ssize_t i = 0; i < S->n_problems; i++) {
        const LineProblem *p = &S->problems[i];
        PyObject *item = Py_BuildValue("(LLLy#KL)", (long long)p->kind, (long long)p->entry, (long long)p->line,
                                       (const char *)S->a + p->name_at, (Py_ssize_t)p->name_len,
                                       (unsigned long long)p->size, (long long)p->left);
        if (!item)
            goto fail;
        PyList_SET_ITEM(problems, i, item);
    }
    return Py_BuildValue("(nNNONNNO)", n_entries, vec_bytes(S->entry_start.v, n_entries, 1, 0),
                         vec_bytes(S->entry_line.v, n_entries, 1, 0), excerpts, keys, problems, bad,
                         S->closed ? Py_True : Py_False);
fail:
    Py_XDECREF(keys);
    Py_XDECREF(problems);
    Py_XDECREF(bad);
    return NULL;
}

/* Every column as long as the piece has entries, and the entries' excerpts. */
/* The valid key named `name`, or NULL. */
static Key *key_named(Scan *S, const char *name)
{
    const Py_ssize_t len = (Py_ssize_t)strlen(name);
    for (Py_ssize_t k = 0; k < S->n_keys; k++)
        if (S->keys[k].valid && S->keys[k].name_len == len && memcmp(S->a + S->keys[k].name_at, name, (size_t)len) == 0)
            return &S->keys[k];
    return NULL;
}

static int bit(const Bytes *bitmap, Py_ssize_t i)
{
    return (bitmap->v[i >> 3] >> (i & 7)) & 1;
}

/* Mark the cursors whose b=, m= and t= are their entry's own `_BOOT_ID`, `__MONOTONIC_TIMESTAMP`
 * and `__REALTIME_TIMESTAMP` (as journald writes them): those the entry's fields give back. */
static int mark_own_cursors(Scan *S, Key *cursor, Py_ssize_t n_entries)
{
    if (zero_fill(&cursor->own, (n_entries + 7) / 8, 0) < 0)
        return -1;
    Key *boot = key_named(S, "_BOOT_ID"), *monotonic = key_named(S, "__MONOTONIC_TIMESTAMP"),
        *realtime = key_named(S, "__REALTIME_TIMESTAMP");
    if (!boot || !boot->coded || !monotonic || !monotonic->integer || !realtime || !realtime->integer)
        return 0;
    int64_t last_b = -1, last_boot = -1;
    for (Py_ssize_t e = 0; e < n_entries; e++) {
        if (!bit(&cursor->parsed, e) || !bit(&monotonic->parsed, e) || !bit(&realtime->parsed, e)
            || !bit(&boot->present, e))
            continue;
        uint64_t m, t;
        memcpy(&m, cursor->numbers[1].v + 8 * e, 8);
        memcpy(&t, cursor->numbers[2].v + 8 * e, 8);
        if (m != *(const uint64_t *)(monotonic->numbers[0].v + 8 * e) || t != *(const uint64_t *)(realtime->numbers[0].v + 8 * e))
            continue;
        uint32_t b_code, boot_code;
        memcpy(&b_code, cursor->ids[1].v + 4 * e, 4);
        memcpy(&boot_code, boot->codes.v + 4 * e, 4);
        if (b_code != last_b || boot_code != last_boot) { /* a pair of ids seen last is the same pair */
            Py_ssize_t b_len, boot_len;
            const uint8_t *b_id = value_bytes(cursor, b_code, &b_len), *boot_id = value_bytes(boot, boot_code, &boot_len);
            if (b_len != boot_len || memcmp(b_id, boot_id, (size_t)b_len) != 0)
                continue;
            last_b = b_code;
            last_boot = boot_code;
        }
        cursor->own.v[e >> 3] |= (uint8_t)(1u << (e & 7));
    }
    return 0;
}

static int finish_columns(Scan *S, Bytes *excerpts, Py_ssize_t excerpt_bytes)
{
    const Py_ssize_t n_entries = S->entry_start.n;
    for (Py_ssize_t k = 0; k < S->n_keys; k++) {
        Key *key = &S->keys[k];
        /* a cursor or integer key every value of which is held as values has no text: no views */
        const int no_text = (key->cursor || key->integer) && key->n_present == 0;
        if (key->valid && !no_text
            && (zero_fill(key->coded ? &key->codes : &key->views, (key->coded ? 4 : 16) * n_entries, 0) < 0
                || zero_fill(&key->present, (n_entries + 7) / 8, 0) < 0))
            return -1;
        if (key->integer && (zero_fill(&key->parsed, (n_entries + 7) / 8, 0) < 0
                             || zero_fill(&key->numbers[0], 8 * n_entries, 0) < 0))
            return -1;
        if (key->cursor) {
            int failed = zero_fill(&key->parsed, (n_entries + 7) / 8, 0) < 0;
            for (int j = 0; j < 2; j++)
                failed |= zero_fill(&key->ids[j], 4 * n_entries, 0) < 0;
            for (int j = 0; j < 4; j++)
                failed |= zero_fill(&key->numbers[j], 8 * n_entries, 0) < 0;
            if (failed)
                return -1;
        }
    }
    for (Py_ssize_t k = 0; k < S->n_keys; k++)
        if (S->keys[k].cursor && mark_own_cursors(S, &S->keys[k], n_entries) < 0)
            return -1;
    if (zero_fill(excerpts, 16 * n_entries, 0) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n_entries; i++) {
        const int64_t start = S->entry_start.v[i];
        int64_t len = S->entry_end.v[i] - start;
        put_view(excerpts->v + 16 * i, S->a + start, len < excerpt_bytes ? len : excerpt_bytes, start);
    }
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(piece, length, at_eof, dense_all, dense_names, coded_names, cursor_name, int_names, excerpt_bytes)\n"
"-> tuple | None\n\n"
"Scan the first `length` bytes of `piece` (whole entries of an export). None when the piece does\n"
"not end between entries (a binary value runs on past it; parse it with the next). Otherwise\n"
"(n_entries, entry_start, entry_line, excerpt_views, keys, line_problems, bad_keys, closed):\n"
"entry_start / entry_line are int64 arrays as bytes (byte offset, 0-based line of its first line);\n"
"excerpt_views the BinaryView views of each entry's first `excerpt_bytes` bytes (into `piece`);\n"
"keys one (name, valid, utf8, views, validity, data, later, codes, cursor) per distinct key in order of first\n"
"appearance: views/validity/data are the Arrow BinaryView buffers of its first values (views into\n"
"`piece` when data is None; validity None when every entry has it; all None for invalid names, and\n"
"views None for a cursor or integer key none of whose values stayed text);\n"
"for a key named in coded_names, codes is each entry's uint32 code and views/data the buffers of\n"
"its distinct values in order of first sight (else codes is None); for the key named cursor_name,\n"
"cursor is (id views, id data, s codes, b codes, i, m, t, x, parsed, own) - the values of every cursor\n"
"in journald's exact form (`parsed`, a bitmap), whose entries have no view, and `own` (a bitmap) those\n"
"whose b=, m=, t= equal the entry's plainly written _BOOT_ID and clocks; for a key in int_names,\n"
"(numbers, parsed): the int64 value of each entry whose value is a plain decimal number below 10^18\n"
"(no sign, no leading zero), which has no view; else None;\n"
"utf8 whether every first value is UTF-8, later the (entries, starts, ends) int64 arrays of\n"
"repeated values or None; line_problems (kind, entry, line, name, size, left) for lines without\n"
"'=' that are not binary fields (kind 0), binary fields whose length is cut off (1, the rest of\n"
"the piece is unreadable), runs past the end (2) or lacks its newline (3); bad_keys (key index,\n"
"entry, line) for every field whose name is not a valid journal field name; closed whether the\n"
"last entry is closed by a blank line. A key's long values are copied into its own data when\n"
"dense_all or its name is in dense_names (a collection of bytes).");

/* The bytes of each name in `collection` (held in *held, so that they stay put while the GIL is
 * let go) as *names / *lens, *n of them; -1 with an exception set when that fails. */
static int name_list(PyObject *collection, PyObject **held, const char ***names, Py_ssize_t **lens, Py_ssize_t *n)
{
    *held = PySequence_List(collection);
    if (!*held)
        return -1;
    *n = PyList_GET_SIZE(*held);
    *names = calloc((size_t)*n + 1, sizeof **names);
    *lens = calloc((size_t)*n + 1, sizeof **lens);
    if (!*names || !*lens) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t d = 0; d < *n; d++)
        if (PyBytes_AsStringAndSize(PyList_GET_ITEM(*held, d), (char **)&(*names)[d], &(*lens)[d]) < 0)
            return -1;
    return 0;
}

static PyObject *py_scan(PyObject *self, PyObject *args)
{
    Py_buffer buffer;
    Py_ssize_t length, excerpt_bytes;
    int at_eof, dense_all;
    PyObject *dense_names, *coded_names, *names = NULL, *coded = NULL, *result = NULL;
    PyObject *int_names, *integers = NULL;
    const char *cursor_name;
    Py_ssize_t cursor_len;
    if (!PyArg_ParseTuple(args, "y*nppOOy#On", &buffer, &length, &at_eof, &dense_all, &dense_names, &coded_names,
                          &cursor_name, &cursor_len, &int_names, &excerpt_bytes))
        return NULL;
    Bytes excerpts = {NULL, 0, 0};
    Scan S;
    memset(&S, 0, sizeof S);
    S.named_past = -1;
    if (length < 0 || length > buffer.len) {
        PyErr_Format(PyExc_ValueError, "length %zd outside the %zd-byte piece", length, buffer.len);
        goto done;
    }
    if (buffer.len > INT32_MAX) { /* Arrow views hold 32-bit offsets */
        PyErr_Format(PyExc_OverflowError, "a %zd-byte piece is too large to scan (limit 2 GiB)", buffer.len);
        goto done;
    }
    if (name_list(dense_names, &names, &S.dense_names, &S.dense_lens, &S.n_dense) < 0
        || name_list(coded_names, &coded, &S.coded_names, &S.coded_lens, &S.n_coded) < 0
        || name_list(int_names, &integers, &S.int_names, &S.int_lens, &S.n_int) < 0)
        goto done;
    S.a = buffer.buf;
    S.m = length;
    S.dense_all = dense_all;
    S.cursor_name = cursor_name;
    S.cursor_len = cursor_len;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = scan(&S, at_eof);
    if (status == SCANNED && finish_columns(&S, &excerpts, excerpt_bytes) < 0)
        status = NO_MEMORY;
    Py_END_ALLOW_THREADS
    if (status == NO_MEMORY)
        PyErr_NoMemory();
    else if (status == OVERRUN)
        result = Py_NewRef(Py_None);
    else {
        PyObject *excerpt_block = take_mapped(&excerpts, 16 * S.entry_start.n);
        if (excerpt_block) {
            result = build_result(&S, excerpt_block);
            Py_DECREF(excerpt_block);
        }
    }
done:
    unmap(&excerpts);
    free(S.dense_names);
    free(S.dense_lens);
    free(S.coded_names);
    free(S.coded_lens);
    free(S.int_names);
    free(S.int_lens);
    Py_XDECREF(names);
    Py_XDECREF(coded);
    Py_XDECREF(integers);
    scan_free(&S);
    PyBuffer_Release(&buffer);
    return result;
}

/* Parses (buffer, length) and checks the length lies within the buffer; 0 with an exception set otherwise. */
static int piece_prefix(PyObject *args, Py_buffer *buffer, Py_ssize_t *length)
{
    if (!PyArg_ParseTuple(args, "y*n", buffer, length))
        return 0;
    if (*length < 0 || *length > buffer->len) {
        PyErr_Format(PyExc_ValueError, "length %zd outside the %zd-byte piece", *length, buffer->len);
        PyBuffer_Release(buffer);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(count_newlines_doc, "count_newlines(piece, length) -> int: newlines in the first `length` bytes.");

static PyObject *py_count_newlines(PyObject *self, PyObject *args)
{
    Py_buffer buffer;
    Py_ssize_t length, count;
    if (!piece_prefix(args, &buffer, &length))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    count = count_newlines(buffer.buf, length);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buffer);
    return PyLong_FromSsize_t(count);
}

PyDoc_STRVAR(newline_positions_doc, "newline_positions(buffer, length) -> bytes\n\n"
             "The offset of every newline in the first `length` bytes of `buffer`, in order, as native int64s.");

static PyObject *py_newline_positions(PyObject *self, PyObject *args)
{
    Py_buffer buffer;
    Py_ssize_t length;
    if (!piece_prefix(args, &buffer, &length))
        return NULL;
    const uint8_t *start = buffer.buf, *end = start + length;
    Py_ssize_t count;
    Py_BEGIN_ALLOW_THREADS
    count = count_newlines(start, length);
    Py_END_ALLOW_THREADS
    PyObject *positions = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (positions) {
        int64_t *out = (int64_t *)PyBytes_AS_STRING(positions);
        Py_BEGIN_ALLOW_THREADS
        for (const uint8_t *a = start; a < end && (a = memchr(a, '\n', (size_t)(end - a))) != NULL; a++)
            *out++ = a - start;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&buffer);
    return positions;
}

/* journalctl's JSON, one entry a line (journal_json._fast): what each line writes after its keys.
 * Every mark starts with a key's closing quote and its colon, `":`, so one pass over the colons of
 * a line finds them all. Counted as polars' literal count_matches counts (occurrences that do not
 * overlap: after `":"` the next may start three bytes on, after `": "` four), so that the Python
 * reader's checks stay what they were. */
typedef struct {
    int32_t keys;     /* `":` */
    int32_t strings;  /* `":"` plus `": "` */
    uint8_t other;    /* `":[`, `": [`, `":null` or `": null` somewhere */
} JsonMarks;

static JsonMarks json_marks(const uint8_t *a, Py_ssize_t n)
{
    JsonMarks marks = {0, 0, 0};
    Py_ssize_t quoted_from = 0, spaced_from = 0;  /* where the next `":"`, `": "` may start */
    const uint8_t *end = a + n, *colon = a;
    while (colon < end && (colon = memchr(colon, ':', (size_t)(end - colon))) != NULL) {
        Py_ssize_t at = colon - a - 1;  /* the quote before the colon */
        colon++;
        if (at < 0 || a[at] != '"')
            continue;
        marks.keys++;
        Py_ssize_t left = n - at - 2;  /* bytes after the colon */
        const uint8_t *after = a + at + 2;
        if (left >= 1 && after[0] == '"' && at >= quoted_from) {
            marks.strings++;
            quoted_from = at + 3;
        }
        if (left >= 2 && after[0] == ' ' && after[1] == '"' && at >= spaced_from) {
            marks.strings++;
            spaced_from = at + 4;
        }
        if ((left >= 1 && after[0] == '[') || (left >= 2 && after[0] == ' ' && after[1] == '[')
            || (left >= 4 && memcmp(after, "null", 4) == 0) || (left >= 5 && memcmp(after, " null", 5) == 0))
            marks.other = 1;
    }
    return marks;
}

PyDoc_STRVAR(json_line_marks_doc, "json_line_marks(buffer, starts, ends) -> (keys, strings, other)\n\n"
             "For each line buffer[starts[i]:ends[i]] (starts and ends: native int64s): how often `\":` occurs "
             "(int32s), how often `\":\"` and `\": \"` do (int32s, their sum; counted without overlaps, as "
             "polars' count_matches does), and whether `\":[`, `\": [`, `\":null` or `\": null` does (bools).");

static PyObject *py_json_line_marks(PyObject *self, PyObject *args)
{
    Py_buffer buffer, starts, ends;
    if (!PyArg_ParseTuple(args, "y*y*y*", &buffer, &starts, &ends))
        return NULL;
    PyObject *result = NULL, *keys = NULL, *strings = NULL, *other = NULL;
    Py_ssize_t rows = starts.len / (Py_ssize_t)sizeof(int64_t);
    if (starts.len != ends.len || starts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must be int64 arrays of one length");
        goto done;
    }
    const int64_t *from = starts.buf, *to = ends.buf;
    for (Py_ssize_t i = 0; i < rows; i++)
        if (from[i] < 0 || from[i] > to[i] || to[i] > buffer.len) {
            PyErr_Format(PyExc_ValueError, "line %zd (%lld to %lld) outside the %zd-byte buffer", i,
                         (long long)from[i], (long long)to[i], buffer.len);
            goto done;
        }
    keys = PyBytes_FromStringAndSize(NULL, rows * (Py_ssize_t)sizeof(int32_t));
    strings = PyBytes_FromStringAndSize(NULL, rows * (Py_ssize_t)sizeof(int32_t));
    other = PyBytes_FromStringAndSize(NULL, rows);
    if (!keys || !strings || !other)
        goto done;
    int32_t *key_counts = (int32_t *)PyBytes_AS_STRING(keys), *string_counts = (int32_t *)PyBytes_AS_STRING(strings);
    uint8_t *others = (uint8_t *)PyBytes_AS_STRING(other);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        JsonMarks marks = json_marks((const uint8_t *)buffer.buf + from[i], (Py_ssize_t)(to[i] - from[i]));
        key_counts[i] = marks.keys;
        string_counts[i] = marks.strings;
        others[i] = marks.other;
    }
    Py_END_ALLOW_THREADS
    result = PyTuple_Pack(3, keys, strings, other);
done:
    Py_XDECREF(keys);
    Py_XDECREF(strings);
    Py_XDECREF(other);
    PyBuffer_Release(&buffer);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {"count_newlines", py_count_newlines, METH_VARARGS, count_newlines_doc},
    {"newline_positions", py_newline_positions, METH_VARARGS, newline_positions_doc},
    {"json_line_marks", py_json_line_marks, METH_VARARGS, json_line_marks_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_export_scan",
    "The hot loop of forensics.sources.journal.journal_export, in C (see the source's header).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__export_scan(void)
{
    if (PyType_Ready(&BlockType) < 0)
        return NULL;
    memset(hex_values, -1, sizeof hex_values);
    for (int d = 0; d < 16; d++)
        hex_values[(uint8_t)"0123456789abcdef"[d]] = (int8_t)d;
    if (getrandom(&hash_seed, sizeof hash_seed, GRND_NONBLOCK) != sizeof hash_seed)
        hash_seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)&hash_seed;
    return PyModule_Create(&module);
}
