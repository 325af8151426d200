/* A STAND-IN for Hermes's cjk_unicode61 FTS5 tokenizer, compiled by the tests (tests/cjk_standin.py).
 *
 * Hermes's own is C in upstream's native/fts5_cjk/ (not in the wheel), built into
 * <home>/lib/libfts5_cjk.so and loaded by hermes_state_fts.load_fts5_cjk_extension. This one
 * registers a tokenizer of the same name that wraps FTS5's built-in unicode61 and, as upstream's
 * does (Lucene CJKAnalyzer semantics), re-emits each run of CJK characters as overlapping
 * bigrams (a lone character stays one token); everything else passes through. Token offsets are
 * the whole unicode61 token's: only highlight() would see the difference.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#define MAX_RUN 4096

typedef int (*TokenFn)(void *, int, const char *, int, int, int);
typedef struct Ctx { void *pCtx; TokenFn xToken; } Ctx;

static fts5_tokenizer unicode61;

static int is_cjk(unsigned c) {
  return (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0xAC00 && c <= 0xD7AF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x20000 && c <= 0x2FFFF);
}

/* The code point at t[i] (of n bytes) and its length in *len. */
static unsigned code_point(const unsigned char *t, int i, int n, int *len) {
  unsigned char b = t[i];
  int l = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  unsigned c = l == 1 ? b : l == 2 ? (b & 0x1F) : l == 3 ? (b & 0x0F) : (b & 0x07);
  int k;
  if (i + l > n) l = n - i;
  for (k = 1; k < l; k++) c = (c << 6) | (t[i + k] & 0x3F);
  *len = l;
  return c;
}

static int on_token(void *p, int tflags, const char *tok, int n, int iStart, int iEnd) {
  Ctx *c = (Ctx *)p;
  const unsigned char *t = (const unsigned char *)tok;
  int starts[MAX_RUN];
  int i = 0, rc = SQLITE_OK;
  while (i < n && rc == SQLITE_OK) {
    int len, j = i, chars = 0, k;
    int cjk = is_cjk(code_point(t, i, n, &len));
    while (j < n && is_cjk(code_point(t, j, n, &len)) == cjk) {
      if (chars < MAX_RUN) starts[chars] = j;
      chars++;
      j += len;
    }
    if (!cjk || chars < 2 || chars > MAX_RUN) {
      rc = c->xToken(c->pCtx, tflags, tok + i, j - i, iStart, iEnd);
    } else {
      for (k = 0; k + 1 < chars && rc == SQLITE_OK; k++) {
        int end = k + 2 < chars ? starts[k + 2] : j;
        rc = c->xToken(c->pCtx, tflags, tok + starts[k], end - starts[k], iStart, iEnd);
      }
    }
    i = j;
  }
  return rc;
}

static int x_create(void *ud, const char **azArg, int nArg, Fts5Tokenizer **ppOut) {
  return unicode61.xCreate(ud, azArg, nArg, ppOut);
}

static void x_delete(Fts5Tokenizer *t) { unicode61.xDelete(t); }

static int x_tokenize(Fts5Tokenizer *t, void *pCtx, int flags, const char *text, int n, TokenFn xToken) {
  Ctx c = {pCtx, xToken};
  return unicode61.xTokenize(t, &c, flags, text, n, on_token);
}

static fts5_api *fts5_api_of(sqlite3 *db) {
  fts5_api *api = 0;
  sqlite3_stmt *st = 0;
  if (sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &st, 0) == SQLITE_OK) {
    sqlite3_bind_pointer(st, 1, (void *)&api, "fts5_api_ptr", 0);
    sqlite3_step(st);
  }
  sqlite3_finalize(st);
  return api;
}

int sqlite3_extension_init(sqlite3 *db, char **pzErr, const sqlite3_api_routines *pApi) {
  static fts5_tokenizer mine = {x_create, x_delete, x_tokenize};
  fts5_api *api;
  void *ud = 0;
  SQLITE_EXTENSION_INIT2(pApi);
  api = fts5_api_of(db);
  if (!api) {
    *pzErr = sqlite3_mprintf("FTS5 is not available");
    return SQLITE_ERROR;
  }
  if (api->xFindTokenizer(api, "unicode61", &ud, &unicode61) != SQLITE_OK) return SQLITE_ERROR;
  return api->xCreateTokenizer(api, "cjk_unicode61", ud, &mine, 0);
}
