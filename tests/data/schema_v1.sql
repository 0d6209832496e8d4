-- The store's SQL as version 1 (schema_version 1) installed it, rendered for schema ar_migrate and 4
-- dimensions: tests/integration/test_migration.py runs db init over a store made by it.

-- agent-retrieval: documents and chunks with their vectors, for Postgres + pgvector and Supabase.
-- Rendered for one schema (ar_migrate) and one embedding dimension (4); safe to run again.

-- Two installs at once would race on "if not exists": the second waits for the first instead.
select pg_advisory_xact_lock(hashtext('agent_retrieval:ar_migrate'));

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

create schema if not exists ar_migrate;
set search_path = ar_migrate, public, extensions;

-- A store is made for one dimension: refuse to run over a store of another, rather than half-migrate it.
do $$
declare
  existing int;
begin
  select a.atttypmod into existing from pg_attribute a
  where a.attrelid = to_regclass('ar_migrate.chunks') and a.attname = 'embedding';
  if existing is not null and existing <> 4 then
    raise exception using errcode = 'AR002',
      message = format('agent-retrieval: schema ar_migrate holds %s-dimensional vectors, not 4', existing),
      hint = 'Initialise another schema for the new embedder, or drop this one first.';
  end if;
end $$;

-- Words are stemmed by the english snowball stemmer but, unlike the english configuration, stopwords are
-- kept: as on the embedded store, a query of only stopwords ("to be or not to be") still finds its rows.
do $$
begin
  if not exists (select 1 from pg_ts_dict
                 where dictname = 'english_stem_all' and dictnamespace = 'ar_migrate'::regnamespace) then
    create text search dictionary ar_migrate.english_stem_all (template = snowball, language = english);
  end if;
  if not exists (select 1 from pg_ts_config
                 where cfgname = 'english_all' and cfgnamespace = 'ar_migrate'::regnamespace) then
    create text search configuration ar_migrate.english_all (copy = english);
    alter text search configuration ar_migrate.english_all
      alter mapping for asciiword, asciihword, hword_asciipart, word, hword, hword_part
      with ar_migrate.english_stem_all;
  end if;
end $$;

create table if not exists ar_migrate.store_info (
  key text primary key,
  value text not null
);
insert into ar_migrate.store_info values ('schema_version', '1'), ('dimension', '4')
  on conflict (key) do nothing;

-- The caller's tenant, from the JWT PostgREST puts in request.jwt.claims (Supabase's auth.uid() reads
-- the same setting): app_metadata.tenant_id when the project groups users into tenants, else the user id.
create or replace function ar_migrate.current_tenant() returns text
language sql stable
set search_path = ''
as $$
  select coalesce(claims -> 'app_metadata' ->> 'tenant_id', claims ->> 'sub')
  from (select nullif(current_setting('request.jwt.claims', true), '')::jsonb as claims) c
$$;

create table if not exists ar_migrate.documents (
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
  embedding vector(4),
  embedding_model text,
  -- keyword search reads the title and, for very long documents, the first 500K characters
  tsv tsvector generated always as
    (to_tsvector('ar_migrate.english_all'::regconfig, title || ' ' || left(content, 500000))) stored,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (tenant_id, id)
);

create table if not exists ar_migrate.chunks (
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
  embedding vector(4),
  embedding_model text,
  tsv tsvector generated always as
    (to_tsvector('ar_migrate.english_all'::regconfig, heading_path || ' ' || content)) stored,
  unique (tenant_id, id),
  unique (tenant_id, document_id, ordinal),
  foreign key (tenant_id, document_id) references ar_migrate.documents (tenant_id, id) on delete cascade
);

create index if not exists documents_id on ar_migrate.documents (id);  -- scopes name ids, not tenants
create index if not exists chunks_document_id on ar_migrate.chunks (document_id);
create index if not exists documents_text_hash on ar_migrate.documents (text_hash);
create index if not exists chunks_text_hash on ar_migrate.chunks (text_hash);
create index if not exists documents_embedding on ar_migrate.documents using hnsw (embedding vector_cosine_ops);
create index if not exists chunks_embedding on ar_migrate.chunks using hnsw (embedding vector_cosine_ops);
create index if not exists documents_tsv on ar_migrate.documents using gin (tsv);
create index if not exists chunks_tsv on ar_migrate.chunks using gin (tsv);
create index if not exists documents_metadata on ar_migrate.documents using gin (metadata jsonb_path_ops);
create index if not exists chunks_metadata on ar_migrate.chunks using gin (metadata jsonb_path_ops);

-- BM25 needs per-term frequencies and per-row lengths, which a tsvector index does not expose:
-- triggers keep one posting per (term, row) and the corpus totals, inside the writing transaction.
create table if not exists ar_migrate.corpus_stats (
  level text not null,
  tenant_id text not null,
  is_public boolean not null,
  rows bigint not null,
  total_length bigint not null,
  primary key (level, tenant_id, is_public)
);

-- The length of a text in indexed terms (stopwords excluded), for BM25's length normalisation.
create or replace function ar_migrate.term_count(v tsvector) returns int
language sql immutable parallel safe
set search_path = ''
as $$
  select coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0)::int from pg_catalog.unnest(v) t
$$;

-- Metadata filters, as the tools take them: {"key": value} equality or {"key": [v1, v2]} one-of.
-- A number matches its text form and back ({"year": "2021"} finds 2021), as on the embedded store.
create or replace function ar_migrate.metadata_matches(metadata jsonb, filter jsonb) returns boolean
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

-- Shared checks of every search: a sane match_count, and a query vector of the store's dimension.
create or replace function ar_migrate.check_search(match_count int, query_embedding vector) returns void
language plpgsql stable
set search_path = ar_migrate, public, extensions
as $$
begin
  if match_count is null or match_count < 1 or match_count > 1000 then
    raise exception using errcode = '22023',
      message = format('match_count must be between 1 and 1000 (got %s)', coalesce(match_count::text, 'null'));
  end if;
  if query_embedding is not null and vector_dims(query_embedding) <> 4 then
    raise exception using errcode = 'AR001', message = 'embedding model mismatch',
      detail = json_build_object(
        'stored', (select value from ar_migrate.store_info where key = 'embedding_model'),
        'dimension', 4, 'got', vector_dims(query_embedding))::text;
  end if;
end $$;


-- Search over documents: postings kept by triggers, then vector (match_documents), BM25 keyword
-- (keyword_search_documents) and fused hybrid search (hybrid_search_documents). Written once, rendered per level.

create table if not exists ar_migrate.documents_terms (
  term text not null,
  row_id bigint not null,
  tf int not null,
  length int not null,       -- the row's length, stored here so scoring reads one index
  tenant_id text not null,   -- and the row's scope, so row-level security holds here too
  is_public boolean not null,
  primary key (term, row_id) include (tf, length, tenant_id, is_public)
);
create index if not exists documents_terms_row_id on ar_migrate.documents_terms (row_id);

create or replace function ar_migrate.index_documents() returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if tg_op in ('DELETE', 'UPDATE') then
    delete from ar_migrate.documents_terms p using old_rows o where p.row_id = o.rowid;
    insert into ar_migrate.corpus_stats as s (level, tenant_id, is_public, rows, total_length)
      select 'documents', o.tenant_id, o.is_public, -count(*), -sum(ar_migrate.term_count(o.tsv))
      from old_rows o group by o.tenant_id, o.is_public
      on conflict (level, tenant_id, is_public) do update
        set rows = s.rows + excluded.rows, total_length = s.total_length + excluded.total_length;
  end if;
  if tg_op in ('INSERT', 'UPDATE') then
    insert into ar_migrate.documents_terms (term, row_id, tf, length, tenant_id, is_public)
      select p.term, p.row_id, p.tf, sum(p.tf) over (partition by p.row_id), p.tenant_id, p.is_public
      from (select t.lexeme as term, n.rowid as row_id, coalesce(pg_catalog.array_length(t.positions, 1), 1) as tf,
                   n.tenant_id, n.is_public
            from new_rows n cross join lateral pg_catalog.unnest(n.tsv) t) p;
    insert into ar_migrate.corpus_stats as s (level, tenant_id, is_public, rows, total_length)
      select 'documents', n.tenant_id, n.is_public, count(*), sum(ar_migrate.term_count(n.tsv))
      from new_rows n group by n.tenant_id, n.is_public
      on conflict (level, tenant_id, is_public) do update
        set rows = s.rows + excluded.rows, total_length = s.total_length + excluded.total_length;
  end if;
  return null;
end $$;

-- One trigger per event: Postgres allows transition tables only on single-event triggers.
create or replace trigger documents_index_insert after insert on ar_migrate.documents
  referencing new table as new_rows for each statement execute function ar_migrate.index_documents();
create or replace trigger documents_index_delete after delete on ar_migrate.documents
  referencing old table as old_rows for each statement execute function ar_migrate.index_documents();
create or replace trigger documents_index_update after update on ar_migrate.documents
  referencing old table as old_rows new table as new_rows for each statement execute function ar_migrate.index_documents();

-- Vector search: the match_count rows nearest by cosine, filters and scope applied inside the search.
-- HNSW answers first; when filters, the document scope or row-level security leave it fewer rows than
-- asked for, an exact scan over the permitted rows answers instead, so a filtered search still fills k.
create or replace function ar_migrate.match_documents(
  query_embedding vector,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  min_similarity float8 default -1,
  tenant text default null
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  vector_similarity float8
)
language plpgsql stable security invoker
set search_path = ar_migrate, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
set hnsw.ef_search = 400  -- recall@10 0.99 at 100K chunks (ef 100: 0.94, 200: 0.97); BENCHMARKS.md
as $$
#variable_conflict use_column
declare
  -- while reembed is switching models, only rows holding the declared model's vectors are comparable
  stored_model text := (select value from ar_migrate.store_info where key = 'embedding_model');
begin
  perform ar_migrate.check_search(match_count, query_embedding);
  if match_count > current_setting('hnsw.ef_search')::int then  -- the index yields at most ef_search rows
    perform pg_catalog.set_config('hnsw.ef_search', least(match_count, 1000)::text, true);
  end if;
  return query
  with approx as materialized (
    select d.rowid, d.embedding <=> query_embedding as distance
    from ar_migrate.documents d
    where d.embedding is not null and d.embedding_model = stored_model
      and ar_migrate.metadata_matches(d.metadata, filter)
      and (document_ids is null or d.id = any (document_ids))
      and (tenant is null or d.tenant_id = tenant or d.is_public)
    order by d.embedding <=> query_embedding
    limit match_count
  ),
  exact as materialized (
    select d.rowid, d.embedding <=> query_embedding as distance
    from ar_migrate.documents d
    where (select count(*) from approx) < match_count
      and d.embedding is not null and d.embedding_model = stored_model
      and ar_migrate.metadata_matches(d.metadata, filter)
      and (document_ids is null or d.id = any (document_ids))
      and (tenant is null or d.tenant_id = tenant or d.is_public)
    order by (d.embedding <=> query_embedding) + 0  -- "+ 0": an expression the HNSW index cannot serve
    limit match_count
  ),
  best as (
    select * from exact
    union all
    select * from approx where (select count(*) from approx) >= match_count
  )
  select d.id, d.id, d.title, left(d.content, 1500), d.metadata, null::int, null::text, 1 - b.distance
  from best b join ar_migrate.documents d on d.rowid = b.rowid
  where 1 - b.distance >= min_similarity
  order by b.distance, d.id;
end $$;

-- Keyword search: Okapi BM25 (k1 = 1.2, b = 0.75, as SQLite FTS5) over the query's own words, stemmed
-- in english, stopwords dropped unless nothing else is left. The words are never parsed as query syntax.
-- Term statistics cover the rows the caller may read, so they reveal nothing of other tenants.
create or replace function ar_migrate.keyword_search_documents(
  query_text text,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  tenant text default null
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  keyword_score float8
)
language plpgsql stable security invoker
set search_path = ar_migrate, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
as $$
#variable_conflict use_column
begin
  perform ar_migrate.check_search(match_count, null);
  return query
  with stemmed as (
    select pg_catalog.to_tsvector('english'::regconfig, q.text) as content_words,
           pg_catalog.to_tsvector('ar_migrate.english_all'::regconfig, q.text) as all_words
    from (select left(coalesce(query_text, ''), 4000) as text) q
  ),
  words as (  -- the content words, or the stopwords when there is nothing else; 32 at most
    select t.lexeme as term
    from stemmed s,
         pg_catalog.unnest(case when pg_catalog.length(s.content_words) > 0 then s.content_words
                                else s.all_words end) t
    order by t.positions[1]
    limit 32
  ),
  corpus as (
    select sum(s.rows)::float8 as n, sum(s.total_length)::float8 / greatest(sum(s.rows), 1) as average_length
    from ar_migrate.corpus_stats s
    where s.level = 'documents' and (tenant is null or s.tenant_id = tenant or s.is_public)
  ),
  weights as (  -- idf over every row the caller may read, whatever the filters
    select p.term, ln(1 + (c.n - count(*)::float8 + 0.5) / (count(*)::float8 + 0.5)) as idf
    from ar_migrate.documents_terms p join words w on w.term = p.term cross join corpus c
    where tenant is null or p.tenant_id = tenant or p.is_public
    group by p.term, c.n
  ),
  scored as (
    select p.row_id,
           sum(w.idf * p.tf::float8 * 2.2
               / (p.tf::float8 + 1.2 * (0.25 + 0.75 * p.length::float8 / greatest(c.average_length, 1))))
             as score
    from ar_migrate.documents_terms p join weights w on w.term = p.term cross join corpus c
    where (tenant is null or p.tenant_id = tenant or p.is_public)
      and (document_ids is null
           or p.row_id in (select d.rowid from ar_migrate.documents d where d.id = any (document_ids)))
    group by p.row_id
  )
  -- Rows are joined best first and only until the limit is filled; without filters only the top
  -- match_count are even sorted.
  select d.id, d.id, d.title, left(d.content, 1500), d.metadata, null::int, null::text, s.score
  from (select sc.row_id, sc.score from scored sc order by sc.score desc, sc.row_id
        limit case when coalesce(filter, '{}') = '{}' then match_count end) s
  join ar_migrate.documents d on d.rowid = s.row_id
  where ar_migrate.metadata_matches(d.metadata, filter)
  order by s.score desc, s.row_id
  limit match_count;
end $$;

-- Hybrid search: both searches with the same filters and scope, fused in SQL by weighted reciprocal
-- rank (fusion => 'rrf') or a convex mix of standard scores ('convex'), as the tools fuse.
create or replace function ar_migrate.hybrid_search_documents(
  query_text text,
  query_embedding vector,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  min_similarity float8 default -1,
  tenant text default null,
  fusion text default 'convex',  -- these defaults are the Context's, filled in by render_sql
  rrf_k int default 60,
  vector_weight float8 default 0.45,
  keyword_weight float8 default 0.55,
  candidates int default 100
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  vector_similarity float8, vector_rank int, keyword_score float8, keyword_rank int, score float8
)
language plpgsql stable security invoker
set search_path = ar_migrate, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
as $$
#variable_conflict use_column
begin
  perform ar_migrate.check_search(match_count, null);
  perform ar_migrate.check_search(candidates, null);
  if fusion not in ('rrf', 'convex') then
    raise exception using errcode = '22023', message = 'fusion must be rrf or convex';
  end if;
  if rrf_k < 1 or vector_weight < 0 or keyword_weight < 0 then
    raise exception using errcode = '22023', message = 'rrf_k must be at least 1 and the weights at least 0';
  end if;
  return query
  with v as (
    select * from ar_migrate.match_documents(query_embedding, candidates, filter, document_ids, min_similarity, tenant)
      with ordinality r(id, document_id, title, content, metadata, ordinal, heading_path, vector_similarity, rank)
  ),
  k as (
    select * from ar_migrate.keyword_search_documents(query_text, candidates, filter, document_ids, tenant)
      with ordinality r(id, document_id, title, content, metadata, ordinal, heading_path, keyword_score, rank)
  ),
  both_sides as (
    select coalesce(v.id, k.id) as id, coalesce(v.document_id, k.document_id) as document_id,
           coalesce(v.title, k.title) as title, coalesce(v.content, k.content) as content,
           coalesce(v.metadata, k.metadata) as metadata, coalesce(v.ordinal, k.ordinal) as ordinal,
           coalesce(v.heading_path, k.heading_path) as heading_path,
           v.vector_similarity, v.rank::int as vector_rank, k.keyword_score, k.rank::int as keyword_rank
    from v full join k on k.id = v.id
  ),
  stats as (
    select avg(vector_similarity) as v_mean, stddev_pop(vector_similarity) as v_sd, min(vector_similarity) as v_low,
           avg(keyword_score) as k_mean, stddev_pop(keyword_score) as k_sd, min(keyword_score) as k_low
    from both_sides
  ),
  fused as (
    -- convex: the weighted mean of standard scores; a row one side did not return takes that side's lowest
    -- (with no spread, present counts 1 and absent 0), exactly as fusion.convex computes it
    select b.*,
      case when fusion = 'rrf' then
        coalesce(vector_weight / (rrf_k + b.vector_rank), 0) + coalesce(keyword_weight / (rrf_k + b.keyword_rank), 0)
      else (
        vector_weight * case when coalesce(s.v_sd, 0) = 0 then (b.vector_similarity is not null)::int
                             else (coalesce(b.vector_similarity, s.v_low) - s.v_mean) / s.v_sd end
        + keyword_weight * case when coalesce(s.k_sd, 0) = 0 then (b.keyword_score is not null)::int
                                else (coalesce(b.keyword_score, s.k_low) - s.k_mean) / s.k_sd end
      ) / coalesce(nullif(vector_weight + keyword_weight, 0), 1)
      end as score
    from both_sides b cross join stats s
  )
  select * from fused order by score desc, id limit match_count;
end $$;


-- Search over chunks: postings kept by triggers, then vector (match_chunks), BM25 keyword
-- (keyword_search_chunks) and fused hybrid search (hybrid_search_chunks). Written once, rendered per level.

create table if not exists ar_migrate.chunks_terms (
  term text not null,
  row_id bigint not null,
  tf int not null,
  length int not null,       -- the row's length, stored here so scoring reads one index
  tenant_id text not null,   -- and the row's scope, so row-level security holds here too
  is_public boolean not null,
  primary key (term, row_id) include (tf, length, tenant_id, is_public)
);
create index if not exists chunks_terms_row_id on ar_migrate.chunks_terms (row_id);

create or replace function ar_migrate.index_chunks() returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if tg_op in ('DELETE', 'UPDATE') then
    delete from ar_migrate.chunks_terms p using old_rows o where p.row_id = o.rowid;
    insert into ar_migrate.corpus_stats as s (level, tenant_id, is_public, rows, total_length)
      select 'chunks', o.tenant_id, o.is_public, -count(*), -sum(ar_migrate.term_count(o.tsv))
      from old_rows o group by o.tenant_id, o.is_public
      on conflict (level, tenant_id, is_public) do update
        set rows = s.rows + excluded.rows, total_length = s.total_length + excluded.total_length;
  end if;
  if tg_op in ('INSERT', 'UPDATE') then
    insert into ar_migrate.chunks_terms (term, row_id, tf, length, tenant_id, is_public)
      select p.term, p.row_id, p.tf, sum(p.tf) over (partition by p.row_id), p.tenant_id, p.is_public
      from (select t.lexeme as term, n.rowid as row_id, coalesce(pg_catalog.array_length(t.positions, 1), 1) as tf,
                   n.tenant_id, n.is_public
            from new_rows n cross join lateral pg_catalog.unnest(n.tsv) t) p;
    insert into ar_migrate.corpus_stats as s (level, tenant_id, is_public, rows, total_length)
      select 'chunks', n.tenant_id, n.is_public, count(*), sum(ar_migrate.term_count(n.tsv))
      from new_rows n group by n.tenant_id, n.is_public
      on conflict (level, tenant_id, is_public) do update
        set rows = s.rows + excluded.rows, total_length = s.total_length + excluded.total_length;
  end if;
  return null;
end $$;

-- One trigger per event: Postgres allows transition tables only on single-event triggers.
create or replace trigger chunks_index_insert after insert on ar_migrate.chunks
  referencing new table as new_rows for each statement execute function ar_migrate.index_chunks();
create or replace trigger chunks_index_delete after delete on ar_migrate.chunks
  referencing old table as old_rows for each statement execute function ar_migrate.index_chunks();
create or replace trigger chunks_index_update after update on ar_migrate.chunks
  referencing old table as old_rows new table as new_rows for each statement execute function ar_migrate.index_chunks();

-- Vector search: the match_count rows nearest by cosine, filters and scope applied inside the search.
-- HNSW answers first; when filters, the document scope or row-level security leave it fewer rows than
-- asked for, an exact scan over the permitted rows answers instead, so a filtered search still fills k.
create or replace function ar_migrate.match_chunks(
  query_embedding vector,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  min_similarity float8 default -1,
  tenant text default null
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  vector_similarity float8
)
language plpgsql stable security invoker
set search_path = ar_migrate, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
set hnsw.ef_search = 400  -- recall@10 0.99 at 100K chunks (ef 100: 0.94, 200: 0.97); BENCHMARKS.md
as $$
#variable_conflict use_column
declare
  -- while reembed is switching models, only rows holding the declared model's vectors are comparable
  stored_model text := (select value from ar_migrate.store_info where key = 'embedding_model');
begin
  perform ar_migrate.check_search(match_count, query_embedding);
  if match_count > current_setting('hnsw.ef_search')::int then  -- the index yields at most ef_search rows
    perform pg_catalog.set_config('hnsw.ef_search', least(match_count, 1000)::text, true);
  end if;
  return query
  with approx as materialized (
    select d.rowid, d.embedding <=> query_embedding as distance
    from ar_migrate.chunks d
    where d.embedding is not null and d.embedding_model = stored_model
      and ar_migrate.metadata_matches(d.metadata, filter)
      and (document_ids is null or d.document_id = any (document_ids))
      and (tenant is null or d.tenant_id = tenant or d.is_public)
    order by d.embedding <=> query_embedding
    limit match_count
  ),
  exact as materialized (
    select d.rowid, d.embedding <=> query_embedding as distance
    from ar_migrate.chunks d
    where (select count(*) from approx) < match_count
      and d.embedding is not null and d.embedding_model = stored_model
      and ar_migrate.metadata_matches(d.metadata, filter)
      and (document_ids is null or d.document_id = any (document_ids))
      and (tenant is null or d.tenant_id = tenant or d.is_public)
    order by (d.embedding <=> query_embedding) + 0  -- "+ 0": an expression the HNSW index cannot serve
    limit match_count
  ),
  best as (
    select * from exact
    union all
    select * from approx where (select count(*) from approx) >= match_count
  )
  select d.id, d.document_id, p.title, d.content, d.metadata, d.ordinal, d.heading_path, 1 - b.distance
  from best b join (ar_migrate.chunks d join ar_migrate.documents p on p.tenant_id = d.tenant_id and p.id = d.document_id) on d.rowid = b.rowid
  where 1 - b.distance >= min_similarity
  order by b.distance, d.id;
end $$;

-- Keyword search: Okapi BM25 (k1 = 1.2, b = 0.75, as SQLite FTS5) over the query's own words, stemmed
-- in english, stopwords dropped unless nothing else is left. The words are never parsed as query syntax.
-- Term statistics cover the rows the caller may read, so they reveal nothing of other tenants.
create or replace function ar_migrate.keyword_search_chunks(
  query_text text,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  tenant text default null
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  keyword_score float8
)
language plpgsql stable security invoker
set search_path = ar_migrate, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
as $$
#variable_conflict use_column
begin
  perform ar_migrate.check_search(match_count, null);
  return query
  with stemmed as (
    select pg_catalog.to_tsvector('english'::regconfig, q.text) as content_words,
           pg_catalog.to_tsvector('ar_migrate.english_all'::regconfig, q.text) as all_words
    from (select left(coalesce(query_text, ''), 4000) as text) q
  ),
  words as (  -- the content words, or the stopwords when there is nothing else; 32 at most
    select t.lexeme as term
    from stemmed s,
         pg_catalog.unnest(case when pg_catalog.length(s.content_words) > 0 then s.content_words
                                else s.all_words end) t
    order by t.positions[1]
    limit 32
  ),
  corpus as (
    select sum(s.rows)::float8 as n, sum(s.total_length)::float8 / greatest(sum(s.rows), 1) as average_length
    from ar_migrate.corpus_stats s
    where s.level = 'chunks' and (tenant is null or s.tenant_id = tenant or s.is_public)
  ),
  weights as (  -- idf over every row the caller may read, whatever the filters
    select p.term, ln(1 + (c.n - count(*)::float8 + 0.5) / (count(*)::float8 + 0.5)) as idf
    from ar_migrate.chunks_terms p join words w on w.term = p.term cross join corpus c
    where tenant is null or p.tenant_id = tenant or p.is_public
    group by p.term, c.n
  ),
  scored as (
    select p.row_id,
           sum(w.idf * p.tf::float8 * 2.2
               / (p.tf::float8 + 1.2 * (0.25 + 0.75 * p.length::float8 / greatest(c.average_length, 1))))
             as score
    from ar_migrate.chunks_terms p join weights w on w.term = p.term cross join corpus c
    where (tenant is null or p.tenant_id = tenant or p.is_public)
      and (document_ids is null
           or p.row_id in (select d.rowid from ar_migrate.chunks d where d.document_id = any (document_ids)))
    group by p.row_id
  )
  -- Rows are joined best first and only until the limit is filled; without filters only the top
  -- match_count are even sorted.
  select d.id, d.document_id, p.title, d.content, d.metadata, d.ordinal, d.heading_path, s.score
  from (select sc.row_id, sc.score from scored sc order by sc.score desc, sc.row_id
        limit case when coalesce(filter, '{}') = '{}' then match_count end) s
  join (ar_migrate.chunks d join ar_migrate.documents p on p.tenant_id = d.tenant_id and p.id = d.document_id) on d.rowid = s.row_id
  where ar_migrate.metadata_matches(d.metadata, filter)
  order by s.score desc, s.row_id
  limit match_count;
end $$;

-- Hybrid search: both searches with the same filters and scope, fused in SQL by weighted reciprocal
-- rank (fusion => 'rrf') or a convex mix of standard scores ('convex'), as the tools fuse.
create or replace function ar_migrate.hybrid_search_chunks(
  query_text text,
  query_embedding vector,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  min_similarity float8 default -1,
  tenant text default null,
  fusion text default 'convex',  -- these defaults are the Context's, filled in by render_sql
  rrf_k int default 60,
  vector_weight float8 default 0.45,
  keyword_weight float8 default 0.55,
  candidates int default 100
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  vector_similarity float8, vector_rank int, keyword_score float8, keyword_rank int, score float8
)
language plpgsql stable security invoker
set search_path = ar_migrate, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
as $$
#variable_conflict use_column
begin
  perform ar_migrate.check_search(match_count, null);
  perform ar_migrate.check_search(candidates, null);
  if fusion not in ('rrf', 'convex') then
    raise exception using errcode = '22023', message = 'fusion must be rrf or convex';
  end if;
  if rrf_k < 1 or vector_weight < 0 or keyword_weight < 0 then
    raise exception using errcode = '22023', message = 'rrf_k must be at least 1 and the weights at least 0';
  end if;
  return query
  with v as (
    select * from ar_migrate.match_chunks(query_embedding, candidates, filter, document_ids, min_similarity, tenant)
      with ordinality r(id, document_id, title, content, metadata, ordinal, heading_path, vector_similarity, rank)
  ),
  k as (
    select * from ar_migrate.keyword_search_chunks(query_text, candidates, filter, document_ids, tenant)
      with ordinality r(id, document_id, title, content, metadata, ordinal, heading_path, keyword_score, rank)
  ),
  both_sides as (
    select coalesce(v.id, k.id) as id, coalesce(v.document_id, k.document_id) as document_id,
           coalesce(v.title, k.title) as title, coalesce(v.content, k.content) as content,
           coalesce(v.metadata, k.metadata) as metadata, coalesce(v.ordinal, k.ordinal) as ordinal,
           coalesce(v.heading_path, k.heading_path) as heading_path,
           v.vector_similarity, v.rank::int as vector_rank, k.keyword_score, k.rank::int as keyword_rank
    from v full join k on k.id = v.id
  ),
  stats as (
    select avg(vector_similarity) as v_mean, stddev_pop(vector_similarity) as v_sd, min(vector_similarity) as v_low,
           avg(keyword_score) as k_mean, stddev_pop(keyword_score) as k_sd, min(keyword_score) as k_low
    from both_sides
  ),
  fused as (
    -- convex: the weighted mean of standard scores; a row one side did not return takes that side's lowest
    -- (with no spread, present counts 1 and absent 0), exactly as fusion.convex computes it
    select b.*,
      case when fusion = 'rrf' then
        coalesce(vector_weight / (rrf_k + b.vector_rank), 0) + coalesce(keyword_weight / (rrf_k + b.keyword_rank), 0)
      else (
        vector_weight * case when coalesce(s.v_sd, 0) = 0 then (b.vector_similarity is not null)::int
                             else (coalesce(b.vector_similarity, s.v_low) - s.v_mean) / s.v_sd end
        + keyword_weight * case when coalesce(s.k_sd, 0) = 0 then (b.keyword_score is not null)::int
                                else (coalesce(b.keyword_score, s.k_low) - s.k_mean) / s.k_sd end
      ) / coalesce(nullif(vector_weight + keyword_weight, 0), 1)
      end as score
    from both_sides b cross join stats s
  )
  select * from fused order by score desc, id limit match_count;
end $$;


-- Reading and writing the store by RPC, so Postgres (by DSN) and Supabase (through PostgREST) share
-- one implementation. Each call is one transaction. Writes and ingestion bookkeeping act on one tenant
-- (writing_tenant below).
-- Reads see the `tenant` argument's rows and public rows, or every row they may read when it is null;
-- row-level security narrows both further for anon and authenticated callers.

-- The tenant a write or its bookkeeping acts on: the argument, else the caller's, else '' (single tenant).
create or replace function ar_migrate.writing_tenant(tenant text) returns text
language sql stable
set search_path = ''
as $$
  select coalesce(tenant, ar_migrate.current_tenant(), '')
$$;

create or replace function ar_migrate.get_store_info() returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(jsonb_object_agg(key, value), '{}'::jsonb) from ar_migrate.store_info
$$;

-- Vectors of another dimension need a schema initialised for it: the column's type is fixed.
create or replace function ar_migrate.require_dimension(model text, dimension int) returns void
language plpgsql immutable
set search_path = ''
as $$
begin
  if dimension is distinct from 4 then
    raise exception using errcode = 'AR002',
      message = format('this store holds 4-dimensional vectors but %s makes %s dimensions', model,
                       coalesce(dimension::text, 'no')),
      hint = 'Initialise a schema for the new dimension with `agent-retrieval db init`.';
  end if;
end $$;

-- Record the embedding model on first write, and refuse vectors of another model or dimension.
create or replace function ar_migrate.claim_embedding_model(model text, dimensions int[]) returns void
language plpgsql
set search_path = ar_migrate, public, extensions
as $$
declare
  stored text := (select value from ar_migrate.store_info where key = 'embedding_model');
begin
  perform ar_migrate.require_dimension(model, d) from unnest(dimensions) d;
  if stored is not null and stored <> model then
    raise exception using errcode = 'AR001', message = 'embedding model mismatch',
      detail = json_build_object('stored', stored, 'dimension', 4, 'current', model)::text;
  end if;
  if stored is null and cardinality(dimensions) > 0 then
    insert into ar_migrate.store_info values ('embedding_model', model) on conflict (key) do nothing;
  end if;
end $$;

create or replace function ar_migrate.set_embedding_model(model text, dimension int) returns void
language plpgsql
set search_path = ''
as $$
begin
  perform ar_migrate.require_dimension(model, dimension);
  insert into ar_migrate.store_info values ('embedding_model', model)
    on conflict (key) do update set value = excluded.value;
end $$;

-- Documents with their complete chunk lists, replacing earlier versions, in one transaction.
-- Rows whose "embedding" is null are stored unembedded, for reembed to fill in later.
create or replace function ar_migrate.upsert_documents(
  documents jsonb, chunks jsonb, model text, tenant text default null
) returns void
language plpgsql security invoker
set search_path = ar_migrate, public, extensions
as $$
declare
  scope text := ar_migrate.writing_tenant(tenant);
begin
  perform ar_migrate.claim_embedding_model(model, array(
    select distinct jsonb_array_length(r -> 'embedding')
    from jsonb_array_elements(documents || chunks) r
    where jsonb_typeof(r -> 'embedding') = 'array'));
  delete from ar_migrate.documents d
  where d.tenant_id = scope and d.id in (select r ->> 'id' from jsonb_array_elements(documents) r);
  insert into ar_migrate.documents (tenant_id, id, title, content, metadata, source, is_public, content_hash,
                                    text_hash, embedding, embedding_model)
  select scope, r ->> 'id', r ->> 'title', r ->> 'content', coalesce(r -> 'metadata', '{}'), r ->> 'source',
         coalesce(r -> 'metadata' -> 'public' = 'true'::jsonb, false), r ->> 'content_hash',
         coalesce(r ->> 'text_hash', ''), (r ->> 'embedding')::vector,
         case when jsonb_typeof(r -> 'embedding') = 'array' then model end
  from jsonb_array_elements(documents) r;
  insert into ar_migrate.chunks (tenant_id, document_id, id, ordinal, heading_path, content, metadata, is_public,
                                 text_hash, embedding, embedding_model)
  select scope, r ->> 'document_id', r ->> 'id', (r ->> 'ordinal')::int, r ->> 'heading_path', r ->> 'content',
         coalesce(r -> 'metadata', '{}'), d.is_public, coalesce(r ->> 'text_hash', ''),
         (r ->> 'embedding')::vector, case when jsonb_typeof(r -> 'embedding') = 'array' then model end
  from jsonb_array_elements(chunks) r
  join ar_migrate.documents d on d.tenant_id = scope and d.id = r ->> 'document_id';
end $$;

create or replace function ar_migrate.delete_documents(ids text[], tenant text default null) returns int
language sql security invoker
set search_path = ''
as $$
  with gone as (
    delete from ar_migrate.documents d
    where d.tenant_id = ar_migrate.writing_tenant(tenant) and d.id = any (ids)
    returning 1)
  select count(*)::int from gone
$$;

-- For each stored id: its content hash, and whether it and all its chunks hold the store's model's vectors.
create or replace function ar_migrate.document_states(ids text[], tenant text default null)
returns table (id text, content_hash text, embedded boolean)
language sql stable security invoker
set search_path = ''
as $$
  select d.id, d.content_hash,
         d.embedding_model is not distinct from m.model and not exists (
           select 1 from ar_migrate.chunks c
           where c.tenant_id = d.tenant_id and c.document_id = d.id
             and c.embedding_model is distinct from m.model)
  from ar_migrate.documents d
  cross join (select (select value from ar_migrate.store_info where key = 'embedding_model') as model) m
  where d.tenant_id = ar_migrate.writing_tenant(tenant) and d.id = any (ids)
$$;

-- Stored vectors of a model for embedding-text hashes, so unchanged text is never embedded twice.
create or replace function ar_migrate.vectors_by_hash(hashes text[], model text, tenant text default null)
returns table (text_hash text, embedding vector)
language sql stable security invoker
set search_path = ar_migrate, public, extensions
as $$
  select distinct on (r.text_hash) r.text_hash, r.embedding
  from (
    select d.text_hash, d.embedding, d.tenant_id, d.embedding_model from ar_migrate.documents d
    where d.text_hash = any (hashes)
    union all
    select c.text_hash, c.embedding, c.tenant_id, c.embedding_model from ar_migrate.chunks c
    where c.text_hash = any (hashes)
  ) r
  where r.embedding_model = model and r.embedding is not null
    and r.tenant_id = ar_migrate.writing_tenant(tenant)
  order by r.text_hash
$$;

-- Rows without a vector of `model`, oldest first, for backfill and re-embedding.
create or replace function ar_migrate.pending_embeddings(
  level text, model text, max_rows int, tenant text default null
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, source text, content_hash text,
  ordinal int, heading_path text
)
language sql stable security invoker
set search_path = ''
as $$
  (select d.id, d.id, d.title, d.content, d.metadata, d.source, d.content_hash, null::int, null::text
   from ar_migrate.documents d
   where level = 'documents' and d.tenant_id = ar_migrate.writing_tenant(tenant)
     and d.embedding_model is distinct from model
   order by d.rowid limit max_rows)
  union all
  (select c.id, c.document_id, null, c.content, c.metadata, null, null, c.ordinal, c.heading_path
   from ar_migrate.chunks c
   where level = 'chunks' and c.tenant_id = ar_migrate.writing_tenant(tenant)
     and c.embedding_model is distinct from model
   order by c.rowid limit max_rows)
$$;

-- Store the vectors (and embedding-text hashes) of rows already stored: [{id, text_hash, embedding}].
create or replace function ar_migrate.set_embeddings(level text, rows jsonb, model text, tenant text default null)
returns void
language plpgsql security invoker
set search_path = ar_migrate, public, extensions
as $$
declare
  scope text := ar_migrate.writing_tenant(tenant);
begin
  perform ar_migrate.require_dimension(model, jsonb_array_length(r -> 'embedding'))
  from jsonb_array_elements(rows) r;
  if level = 'documents' then
    update ar_migrate.documents d
    set text_hash = r ->> 'text_hash', embedding = (r ->> 'embedding')::vector, embedding_model = model,
        updated_at = now()
    from jsonb_array_elements(rows) r
    where d.tenant_id = scope and d.id = r ->> 'id';
  elsif level = 'chunks' then
    update ar_migrate.chunks c
    set text_hash = r ->> 'text_hash', embedding = (r ->> 'embedding')::vector, embedding_model = model
    from jsonb_array_elements(rows) r
    where c.tenant_id = scope and c.id = r ->> 'id';
  else
    raise exception using errcode = '22023', message = 'level must be documents or chunks';
  end if;
end $$;

-- The chunks of these documents in reading order, documents in the order given.
create or replace function ar_migrate.document_chunks(ids text[], max_rows int, tenant text default null)
returns table (id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text)
language sql stable security invoker
set search_path = ''
as $$
  select c.id, c.document_id, d.title, c.content, c.metadata, c.ordinal, c.heading_path
  from unnest(ids) with ordinality wanted(id, position)
  join ar_migrate.chunks c on c.document_id = wanted.id
  join ar_migrate.documents d on d.tenant_id = c.tenant_id and d.id = c.document_id
  where tenant is null or c.tenant_id = tenant or c.is_public
  order by wanted.position, c.ordinal
  limit max_rows
$$;

create or replace function ar_migrate.unknown_documents(ids text[], tenant text default null)
returns setof text
language sql stable security invoker
set search_path = ''
as $$
  select wanted.id from unnest(ids) with ordinality wanted(id, position)
  where not exists (
    select 1 from ar_migrate.documents d
    where d.id = wanted.id and (tenant is null or d.tenant_id = tenant or d.is_public))
  order by wanted.position
$$;

create or replace function ar_migrate.store_stats(tenant text default null) returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  with info as (select ar_migrate.get_store_info() as i)
  select jsonb_build_object(
    'documents', (select count(*) from ar_migrate.documents d
                  where tenant is null or d.tenant_id = tenant or d.is_public),
    'chunks', (select count(*) from ar_migrate.chunks c
               where tenant is null or c.tenant_id = tenant or c.is_public),
    'documents_missing_embeddings', (
      select count(*) from ar_migrate.documents d
      where (tenant is null or d.tenant_id = tenant or d.is_public)
        and d.embedding_model is distinct from (select i ->> 'embedding_model' from info)),
    'chunks_missing_embeddings', (
      select count(*) from ar_migrate.chunks c
      where (tenant is null or c.tenant_id = tenant or c.is_public)
        and c.embedding_model is distinct from (select i ->> 'embedding_model' from info)),
    'embedding_model', (select i ->> 'embedding_model' from info),
    'dimension', (select (i ->> 'dimension')::int from info),
    'schema_version', (select (i ->> 'schema_version')::int from info))
$$;


-- Row-level security, as on Supabase: an authenticated caller reads its tenant's rows and public ones,
-- anon reads public rows only, and only service_role (which bypasses RLS) writes. Every function above
-- is security invoker, so these policies hold inside them. On plain Postgres without Supabase's roles
-- the policies are skipped; the table owner (the DSN's user) is not subject to RLS.

alter table ar_migrate.store_info enable row level security;
alter table ar_migrate.documents enable row level security;
alter table ar_migrate.chunks enable row level security;
alter table ar_migrate.documents_terms enable row level security;
alter table ar_migrate.chunks_terms enable row level security;
alter table ar_migrate.corpus_stats enable row level security;

do $$
declare
  rel text;
begin
  if not exists (select 1 from pg_roles where rolname = 'authenticated')
     or not exists (select 1 from pg_roles where rolname = 'anon') then
    return;
  end if;

  grant usage on schema ar_migrate to anon, authenticated;
  grant select on all tables in schema ar_migrate to anon, authenticated;
  revoke insert, update, delete, truncate on all tables in schema ar_migrate from anon, authenticated;

  drop policy if exists "everyone reads store info" on ar_migrate.store_info;
  create policy "everyone reads store info" on ar_migrate.store_info for select to anon, authenticated using (true);

  foreach rel in array array['documents', 'chunks', 'documents_terms', 'chunks_terms', 'corpus_stats'] loop
    execute format('drop policy if exists "tenant and public rows" on ar_migrate.%I', rel);
    execute format('create policy "tenant and public rows" on ar_migrate.%I for select to authenticated '
                   'using (tenant_id = (select ar_migrate.current_tenant()) or is_public)', rel);
    execute format('drop policy if exists "public rows" on ar_migrate.%I', rel);
    execute format('create policy "public rows" on ar_migrate.%I for select to anon using (is_public)', rel);
  end loop;

  -- Writing functions are for the service role; reading ones for everyone (RLS decides what they see).
  revoke execute on all functions in schema ar_migrate from public;
  grant execute on all functions in schema ar_migrate to anon, authenticated;
  revoke execute on function
    ar_migrate.upsert_documents(jsonb, jsonb, text, text),
    ar_migrate.delete_documents(text[], text),
    ar_migrate.set_embeddings(text, jsonb, text, text),
    ar_migrate.set_embedding_model(text, int),
    ar_migrate.claim_embedding_model(text, int[])
  from anon, authenticated;
end $$;

do $$
begin
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    grant usage on schema ar_migrate to service_role;
    grant all on all tables in schema ar_migrate to service_role;
    grant execute on all functions in schema ar_migrate to service_role;
  end if;
end $$;

-- PostgREST (and so Supabase) caches the schema: tell it the functions changed.
notify pgrst, 'reload schema';

