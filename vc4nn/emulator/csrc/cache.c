/* cache.LruCache in C: a set-associative LRU cache of whole lines for the cycle model, with a
 * pair of values per line (a TMU cache: the write epoch; the V3D L2: the clock its fill arrives
 * and that epoch; an instruction cache: the clock its fill arrives; the VideoCore L2: nothing).
 * Line ``n`` maps to set ``n % sets``; a set keeps at most ``ways`` lines, least recently used
 * first; size 0 holds nothing. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

int lru_init(Lru *c, long long size, long long line, long long ways, const char *line_name)
{
    lru_free(c);
    if (line <= 0) {
        PyErr_Format(PyExc_ValueError, "the C core needs a positive %s, not %lld", line_name, line);
        return -1;
    }
    c->ways = size ? (int)ways : 0;
    long long per_set = line * (ways > 1 ? ways : 1);
    c->sets = size / per_set > 1 ? (int)(size / per_set) : 1;
    c->line = line;
    size_t slots = (size_t)c->sets * (size_t)(c->ways ? c->ways : 1);
    c->used = calloc((size_t)c->sets, sizeof(int));
    c->lines = malloc(slots * sizeof(int64_t));
    c->values = malloc(2 * slots * sizeof(int64_t));
    if (!c->used || !c->lines || !c->values) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void lru_free(Lru *c)
{
    free(c->used);
    free(c->lines);
    free(c->values);
    c->used = NULL;
    c->lines = NULL;
    c->values = NULL;
}

/* LruCache.get: 1 and the line's values when it is cached (it becomes most recently used) */
int lru_get(Lru *c, int64_t line, int64_t *first, int64_t *second)
{
    if (!c->ways)
        return 0;
    int set = (int)(line % c->sets);
    int64_t *lines = c->lines + (size_t)set * c->ways;
    int64_t *values = c->values + 2 * (size_t)set * c->ways;
    int n = c->used[set];
    for (int i = 0; i < n; i++)
        if (lines[i] == line) {
            *first = values[2 * i];
            *second = values[2 * i + 1];
            memmove(lines + i, lines + i + 1, (size_t)(n - 1 - i) * sizeof(int64_t));
            memmove(values + 2 * i, values + 2 * i + 2, 2 * (size_t)(n - 1 - i) * sizeof(int64_t));
            lines[n - 1] = line;
            values[2 * n - 2] = *first;
            values[2 * n - 1] = *second;
            return 1;
        }
    return 0;
}

/* LruCache.peek: 1 when the line is cached; the order of use does not change */
int lru_peek(const Lru *c, int64_t line)
{
    if (!c->ways)
        return 0;
    int set = (int)(line % c->sets);
    const int64_t *lines = c->lines + (size_t)set * c->ways;
    for (int i = 0; i < c->used[set]; i++)
        if (lines[i] == line)
            return 1;
    return 0;
}

/* LruCache.put for a line not cached: most recently used, evicting its set's least recently
 * used when the set is full */
void lru_put(Lru *c, int64_t line, int64_t first, int64_t second)
{
    if (!c->ways)
        return;
    int set = (int)(line % c->sets);
    int64_t *lines = c->lines + (size_t)set * c->ways;
    int64_t *values = c->values + 2 * (size_t)set * c->ways;
    int n = c->used[set];
    if (n == c->ways) {
        memmove(lines, lines + 1, (size_t)(n - 1) * sizeof(int64_t));
        memmove(values, values + 2, 2 * (size_t)(n - 1) * sizeof(int64_t));
        n--;
    }
    lines[n] = line;
    values[2 * n] = first;
    values[2 * n + 1] = second;
    c->used[set] = n + 1;
}
