-- agent-retrieval: documents and chunks with their vectors, for Postgres + pgvector and Supabase.
-- Rendered for one schema ({{schema}}) and one embedding dimension ({{dimension}}); safe to run again.

-- Two installs at once would race on "if not exists": the second waits for the first instead.
select pg_advisory_xact_lock(hashtext('agent_retrieval:{{schema}}'));

do $$
begin
  if not exists (select 1 from pg_extension where extname = 'vector') then
    -- Supabase keeps extensions in their own schema; plain Postgres puts them in the current one.
    if exists (select 1 from pg_namespace where nspname = 'extensions') then
      create extension vector with schema extensions;
    else
      create extension vector;
    end if;
  end if;
end $$;

create schema if not exists {{schema}};
set search_path = {{schema}}, public, extensions;

-- A store is made for one dimension: refuse to run over a store of another, rather than half-migrate it.
do $$
declare
  existing int;
begin
  select a.atttypmod into existing from pg_attribute a
  where a.attrelid = to_regclass('{{schema}}.chunks') and a.attname = 'embedding';
  if existing is not null and existing <> {{dimension}} then
    raise exception using errcode = 'AR002',
      message = format('agent-retrieval: schema {{schema}} holds %s-dimensional vectors, not {{dimension}}', existing),
      hint = 'Initialise another schema for the new embedder, or drop this one first.';
  end if;
end $$;

-- Words are stemmed by the english snowball stemmer but, unlike the english configuration, stopwords are
-- kept: as on the embedded store, a query of only stopwords ("to be or not to be") still finds its rows.
do $$
begin
  if not exists (select 1 from pg_ts_dict
                 where dictname = 'english_stem_all' and dictnamespace = '{{schema}}'::regnamespace) then
    create text search dictionary {{schema}}.english_stem_all (template = snowball, language = english);
  end if;
  if not exists (select 1 from pg_ts_config
                 where cfgname = 'english_all' and cfgnamespace = '{{schema}}'::regnamespace) then
    create text search configuration {{schema}}.english_all (copy = english);
    alter text search configuration {{schema}}.english_all
      alter mapping for asciiword, asciihword, hword_asciipart, word, hword, hword_part
      with {{schema}}.english_stem_all;
  end if;
end $$;

create table if not exists {{schema}}.store_info (
  key text primary key,
  value text not null
);
insert into {{schema}}.store_info values ('schema_version', '{{schema_version}}'),
                                         ('dimension', '{{dimension}}')
  on conflict (key) do nothing;

-- Stores made by an earlier version are brought up to date here, each step once (schema_version says which
-- ran; 004_security.sql records the new version once everything below is in place).
-- Version 2: the search functions and document_chunks return each row's tenant_id, and document_states each
-- document's source and visibility; the functions whose answers can grow (document_chunks, document_states,
-- vectors_by_hash, pending_embeddings, unknown_documents) answer one jsonb value instead of rows, so that
-- PostgREST's row cap cannot cut them. "create or replace" cannot change a function's result type or
-- arguments, so those functions are dropped and made again below.
do $$
begin
  if (select value::int from {{schema}}.store_info where key = 'schema_version') < 2 then
    drop function if exists
      {{schema}}.match_documents(vector, int, jsonb, text[], float8, text),
      {{schema}}.match_chunks(vector, int, jsonb, text[], float8, text),
      {{schema}}.keyword_search_documents(text, int, jsonb, text[], text),
      {{schema}}.keyword_search_chunks(text, int, jsonb, text[], text),
      {{schema}}.hybrid_search_documents(text, vector, int, jsonb, text[], float8, text, text, int, float8,
                                         float8, int),
      {{schema}}.hybrid_search_chunks(text, vector, int, jsonb, text[], float8, text, text, int, float8,
                                      float8, int),
      {{schema}}.document_states(text[], text),
      {{schema}}.vectors_by_hash(text[], text, text),
      {{schema}}.pending_embeddings(text, text, int, text),
      {{schema}}.document_chunks(text[], int, text),
      {{schema}}.unknown_documents(text[], text);
  end if;
  -- Version 4: keyword search returns each row's keyword_coverage. (Version 5 adds the per-term counts,
  -- made and filled in 002, and changes no function's signature; version 6 adds metadata_counts.)
  -- Version 9: keyword search also counts the query's words no row holds (unknown_terms).
  if (select value::int from {{schema}}.store_info where key = 'schema_version') < 9 then
    drop function if exists
      {{schema}}.keyword_search_documents(text, int, jsonb, text[], text),
      {{schema}}.keyword_search_chunks(text, int, jsonb, text[], text);
  end if;
  -- Version 10: the keyword postings are kept per term and block of rows (002 makes them again from each
  -- row's text), so the stored tsvector columns and their GIN indexes, which no search read, go.
  if (select value::int from {{schema}}.store_info where key = 'schema_version') < 10 then
    drop index if exists {{schema}}.documents_tsv, {{schema}}.chunks_tsv;
    alter table if exists {{schema}}.documents drop column if exists tsv;
    alter table if exists {{schema}}.chunks drop column if exists tsv;
    drop table if exists {{schema}}.documents_terms, {{schema}}.chunks_terms;
    drop function if exists {{schema}}.term_count(tsvector),
      {{schema}}.bm25_documents(text[], float8[], text[], float8, text, text[]),
      {{schema}}.bm25_chunks(text[], float8[], text[], float8, text, text[]);
  end if;
  -- Version 11: bm25_* takes each term's row count (`counts`, for its stages) and `top` (the rows a first
  -- pass scores over every term).
  -- (Version 12 adds corpus_totals_*, keyword_terms_*, keyword_postings_* and keyword_rows_*, the parts
  -- of keyword search the DSN store calls to score it itself; 15 changes how bm25_* reads a word's postings
  -- and 16 and 17 add scope_rows_* and filter_rows_*: nothing to drop.)
  if (select value::int from {{schema}}.store_info where key = 'schema_version') < 11 then
    drop function if exists
      {{schema}}.bm25_documents(text[], float8[], text[], float8, text, text[], float8, float8),
      {{schema}}.bm25_chunks(text[], float8[], text[], float8, text, text[], float8, float8);
  end if;
  -- Version 20: keyword_terms_* also returns the corpus totals' rows (a client sizes a filter's rows by them;
  -- filter_scope_rows_* is new). Version 21: match_* takes the rows a client listed for a filter (and
  -- stamp_holds_* is new).
  if (select value::int from {{schema}}.store_info where key = 'schema_version') < 20 then
    drop function if exists
      {{schema}}.keyword_terms_documents(text, text), {{schema}}.keyword_terms_chunks(text, text);
  end if;
  if (select value::int from {{schema}}.store_info where key = 'schema_version') < 21 then
    drop function if exists
      {{schema}}.match_documents(vector, int, jsonb, text[], float8, text),
      {{schema}}.match_chunks(vector, int, jsonb, text[], float8, text);
  end if;
end $$;

-- The caller's tenant, from the JWT PostgREST puts in request.jwt.claims (Supabase's auth.uid() reads the
-- same setting). User ids and tenant names are kept in disjoint namespaces, so that no user id reads a
-- tenant's rows:
--   a tenant claim (app_metadata.tenant_id; users cannot edit app_metadata) names the tenant, when it is
--     non-empty text outside the user namespace; any other tenant claim (empty, not text, or beginning with
--     'user:') names no tenant, and such a caller reads public rows only;
--   a token without a tenant claim reads its user's own namespace, 'user:' || sub;
--   a token without either (anon, the service role) has no tenant.
-- agent_retrieval/identity.py (tenant_of_claims) is the same rule for the LangGraph auth handler.
create or replace function {{schema}}.current_tenant() returns text
language sql stable
set search_path = ''
as $$
  select case
    when pg_catalog.jsonb_typeof(c.claims -> 'app_metadata') = 'object'
         and c.claims -> 'app_metadata' ? 'tenant_id'
      then case when pg_catalog.jsonb_typeof(c.claims -> 'app_metadata' -> 'tenant_id') = 'string'
                     and c.claims -> 'app_metadata' ->> 'tenant_id' <> ''
                     and not pg_catalog.starts_with(c.claims -> 'app_metadata' ->> 'tenant_id', 'user:')
                then c.claims -> 'app_metadata' ->> 'tenant_id' end
    when pg_catalog.jsonb_typeof(c.claims -> 'sub') = 'string' and c.claims ->> 'sub' <> ''
      then 'user:' || (c.claims ->> 'sub')
  end
  from (select nullif(current_setting('request.jwt.claims', true), '')::jsonb as claims) c
$$;

create table if not exists {{schema}}.documents (
  rowid bigint generated always as identity primary key,
  tenant_id text not null default '',
  id text not null,
  title text not null,
  content text not null,
  metadata jsonb not null default '{}',
  source text,
  is_public boolean not null default false,
  content_hash text not null,
  text_hash text not null default '',
  embedding vector({{dimension}}),
  embedding_model text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (tenant_id, id)
);

create table if not exists {{schema}}.chunks (
  rowid bigint generated always as identity primary key,
  tenant_id text not null default '',
  document_id text not null,
  id text not null,
  ordinal int not null,
  heading_path text not null,
  content text not null,
  metadata jsonb not null default '{}',
  is_public boolean not null default false,
  text_hash text not null default '',
  embedding vector({{dimension}}),
  embedding_model text,
  unique (tenant_id, id),
  unique (tenant_id, document_id, ordinal),
  foreign key (tenant_id, document_id) references {{schema}}.documents (tenant_id, id) on delete cascade
);

create index if not exists documents_id on {{schema}}.documents (id);  -- scopes name ids, not tenants
create index if not exists chunks_document_id on {{schema}}.chunks (document_id);
create index if not exists documents_text_hash on {{schema}}.documents (text_hash);
create index if not exists chunks_text_hash on {{schema}}.chunks (text_hash);
-- The HNSW indexes, built as deep as the operator's vector_index_build_depth asks (pgvector's ef_construction):
-- deeper finds more of the true nearest rows of a large store and makes the build and every insert slower.
-- An index of another depth (64, pgvector's default, when it names none) is built again beside the old one
-- and swapped in, so that searches read the old one until then. Rendered without a depth, this keeps an
-- index's depth and makes a missing one at 64.
do $$
declare
  wanted int := {{build_depth}};
  level text;
  built int;
begin
  foreach level in array array['documents', 'chunks'] loop
    select coalesce((select pg_catalog.split_part(o, '=', 2)::int from pg_catalog.unnest(c.reloptions) o
                     where o like 'ef_construction=%'), 64)
      into built
    from pg_catalog.pg_class c where c.oid = pg_catalog.to_regclass('{{schema}}.' || level || '_embedding');
    if built is null or built <> coalesce(wanted, built) then
      execute format('create index %I on {{schema}}.%I using hnsw (embedding vector_cosine_ops) '
                     'with (ef_construction = %s)', level || '_embedding_built', level, coalesce(wanted, 64));
      if built is not null then
        raise notice using errcode = 'AR003',  -- db init prints these notices
          message = format('the %s vector index was built again %s deep (it was %s deep)', level, wanted, built);
      end if;
      execute format('drop index if exists {{schema}}.%I', level || '_embedding');
      execute format('alter index {{schema}}.%I rename to %I', level || '_embedding_built', level || '_embedding');
    end if;
  end loop;
end $$;

create index if not exists documents_metadata on {{schema}}.documents using gin (metadata jsonb_path_ops);
create index if not exists chunks_metadata on {{schema}}.chunks using gin (metadata jsonb_path_ops);

-- BM25 needs per-term frequencies and per-row lengths, which a tsvector index does not expose: triggers
-- keep the postings (002) and the corpus totals, inside the writing transaction.
create table if not exists {{schema}}.corpus_stats (
  level text not null,
  tenant_id text not null,
  is_public boolean not null,
  rows bigint not null,
  total_length bigint not null,
  primary key (level, tenant_id, is_public)
);

-- The words keyword search indexes in a text, stemmed, each with its count (tsvector keeps 256 positions
-- of a word at most, so a count fits a smallint); a row's length for BM25 is the sum of its counts.
-- Every name in it is qualified, and it sets no search_path, so that Postgres inlines it into the
-- statements that index rows (a function with a setting is called once a row instead).
create or replace function {{schema}}.words(body text) returns table (term text, tf smallint)
language sql immutable parallel safe
as $$
  select t.lexeme, coalesce(pg_catalog.array_length(t.positions, 1), 1)::smallint
  from pg_catalog.unnest(pg_catalog.to_tsvector('{{schema}}.english_all'::regconfig, body)) t
$$;

-- One term's part of a row's BM25 score, as SQLite FTS5 computes it (k1 = 1.2, b = 0.75): its idf, its count
-- in the row, the row's length and the corpus's average length. At most 2.2 x idf, the bound pruning uses.
-- Inlined like words() above (no setting, every name qualified): it runs once per posting scored.
create or replace function {{schema}}.bm25_part(idf float8, tf float8, length float8, average_length float8)
returns float8
language sql immutable parallel safe
as $$
  select idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / greatest(average_length, 1)))
$$;

-- Metadata filters, as the tools take them: {"key": value} equality or {"key": [v1, v2]} one-of.
-- A number matches its text form and back ({"year": "2021"} finds 2021), as on the embedded store.
create or replace function {{schema}}.metadata_matches(metadata jsonb, filter jsonb) returns boolean
language sql immutable parallel safe
set search_path = ''
as $$
  select coalesce(filter, '{}'::jsonb) = '{}'::jsonb or not exists (
    select 1 from pg_catalog.jsonb_each(filter) f(key, allowed)
    where not exists (
      select 1
      from pg_catalog.jsonb_array_elements(
        case pg_catalog.jsonb_typeof(f.allowed) when 'array' then f.allowed
             else pg_catalog.jsonb_build_array(f.allowed) end) v(value)
      where metadata -> f.key = v.value
         or (pg_catalog.jsonb_typeof(v.value) in ('string', 'number')
             and pg_catalog.jsonb_typeof(metadata -> f.key) in ('string', 'number')
             and (metadata ->> f.key) = (v.value #>> '{}'))))
$$;

-- The jsonpath the metadata's GIN index (jsonb_path_ops) answers for a filter: it keeps every row
-- metadata_matches keeps and few others (metadata_matches still decides), so an exact scan over a selective
-- filter reads the index instead of every row. Searches also test a row by it (jsonb_path_exists) before
-- metadata_matches, whose calls are not inlined (its own search_path) and cost about 10 us each: most of
-- the rows a filtered vector search reads on through leave at the path. Each value as written, and in the other form
-- metadata_matches accepts (a number's text, a numeral's number). Null (no index) for an empty filter, a
-- value that is an object or array, or a key with no values.
create or replace function {{schema}}.filter_path(filter jsonb) returns jsonpath
language sql immutable parallel safe
set search_path = ''
as $$
  with allowed as (
    select f.key, v.value
    from pg_catalog.jsonb_each(case pg_catalog.jsonb_typeof(filter) when 'object' then filter else '{}' end)
      f(key, allowed)
    cross join pg_catalog.jsonb_array_elements(
      case pg_catalog.jsonb_typeof(f.allowed) when 'array' then f.allowed
           else pg_catalog.jsonb_build_array(f.allowed) end) v(value)
  ),
  forms as (
    select key, value::text as literal from allowed
    union all
    select key, pg_catalog.to_json(value #>> '{}')::text from allowed
    where pg_catalog.jsonb_typeof(value) = 'number'
    union all
    select key, value #>> '{}' from allowed
    where pg_catalog.jsonb_typeof(value) = 'string'
      and (value #>> '{}') ~ '^-?[0-9]{1,30}(\.[0-9]{1,30})?([eE][-+]?[0-9]{1,3})?$'
  ),
  clauses as (
    select '(' || pg_catalog.string_agg('@.' || pg_catalog.to_json(key)::text || ' == ' || literal, ' || ')
           || ')' as clause
    from forms group by key
  )
  select case
    when exists (select 1 from allowed where pg_catalog.jsonb_typeof(value) in ('object', 'array'))
      or (select pg_catalog.count(*) from clauses)
         <> (select pg_catalog.count(*) from pg_catalog.jsonb_object_keys(
               case pg_catalog.jsonb_typeof(filter) when 'object' then filter else '{}' end))
      or not exists (select 1 from clauses) then null
    else ('$ ? (' || (select pg_catalog.string_agg(clause, ' && ') from clauses) || ')')::pg_catalog.jsonpath
  end
$$;

-- A caller's count or array size within its bound, or an error naming both. The functions anyone with the
-- anon key can call through PostgREST check their own bounds with it: the client checks the same numbers
-- first, in its own words, but a caller need not come through the client.
create or replace function {{schema}}.check_bound(what text, given bigint, most bigint) returns boolean
language plpgsql immutable
set search_path = ''
as $$
begin
  if given > most then
    raise exception using errcode = '22023',
      message = pg_catalog.format('%s: at most %s (got %s)', what, most, given);
  end if;
  return true;
end $$;

-- A search's scope within the tools' bounds: at most 10,000 document ids, filters of at most 16 keys with
-- at most 200 values each (the client adds a number's text form to a one-of list of 100).
create or replace function {{schema}}.check_scope(filter jsonb, document_ids text[]) returns void
language plpgsql immutable
set search_path = ''
as $$
begin
  perform {{schema}}.check_bound('document_ids', pg_catalog.cardinality(document_ids), 10000);
  if pg_catalog.jsonb_typeof(filter) = 'object' then
    perform {{schema}}.check_bound('filter keys', (select pg_catalog.count(*) from pg_catalog.jsonb_object_keys(filter)), 16);
    perform {{schema}}.check_bound('values of one filter key',
      (select pg_catalog.max(pg_catalog.jsonb_array_length(f.value)) from pg_catalog.jsonb_each(filter) f
       where pg_catalog.jsonb_typeof(f.value) = 'array'), 200);
  end if;
end $$;

-- Shared checks of every search: a sane match_count, and a query vector of the store's dimension.
create or replace function {{schema}}.check_search(match_count int, query_embedding vector) returns void
language plpgsql stable
set search_path = {{schema}}, public, extensions
as $$
begin
  if match_count is null or match_count < 1 or match_count > 1000 then
    raise exception using errcode = '22023',
      message = format('match_count must be between 1 and 1000 (got %s)', coalesce(match_count::text, 'null'));
  end if;
  if query_embedding is not null and vector_dims(query_embedding) <> {{dimension}} then
    raise exception using errcode = 'AR001', message = 'embedding model mismatch',
      detail = json_build_object(
        'stored', (select value from {{schema}}.store_info where key = 'embedding_model'),
        'dimension', {{dimension}}, 'got', vector_dims(query_embedding))::text;
  end if;
end $$;
