-- Reading and writing the store by RPC, so Postgres (by DSN) and Supabase (through PostgREST) share
-- one implementation. Each call is one transaction. Writes and ingestion bookkeeping act on one tenant
-- (writing_tenant below).
-- Reads see the `tenant` argument's rows and public rows, or every row they may read when it is null;
-- row-level security narrows both further for anon and authenticated callers. Ids are unique within a
-- tenant only: a row is (tenant_id, id), and what a read returns names each row's tenant.
-- Answers that can grow past PostgREST's row cap (db-max-rows: 1000 on hosted Supabase, and cut silently)
-- are one jsonb value instead of rows: a bounded page, or the answer for a bounded list of ids.

-- The tenant a write or its bookkeeping acts on: the argument, else the caller's, else '' (single tenant).
create or replace function {{schema}}.writing_tenant(tenant text) returns text
language sql stable
set search_path = ''
as $$
  select coalesce(tenant, {{schema}}.current_tenant(), '')
$$;

create or replace function {{schema}}.get_store_info() returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(jsonb_object_agg(key, value), '{}'::jsonb) from {{schema}}.store_info
$$;

-- Vectors of another dimension need a schema initialised for it: the column's type is fixed.
create or replace function {{schema}}.require_dimension(model text, dimension int) returns void
language plpgsql immutable
set search_path = ''
as $$
begin
  if dimension is distinct from {{dimension}} then
    raise exception using errcode = 'AR002',
      message = format('this store holds {{dimension}}-dimensional vectors but %s makes %s dimensions', model,
                       coalesce(dimension::text, 'no')),
      hint = 'Initialise a schema for the new dimension with `agent-retrieval db init`.';
  end if;
end $$;

-- Record the embedding model on first write, and refuse vectors of another model or dimension.
create or replace function {{schema}}.claim_embedding_model(model text, dimensions int[]) returns void
language plpgsql
set search_path = {{schema}}, public, extensions
as $$
declare
  stored text := (select value from {{schema}}.store_info where key = 'embedding_model');
begin
  perform {{schema}}.require_dimension(model, d) from unnest(dimensions) d;
  if stored is not null and stored <> model then
    raise exception using errcode = 'AR001', message = 'embedding model mismatch',
      detail = json_build_object('stored', stored, 'dimension', {{dimension}}, 'current', model)::text;
  end if;
  if stored is null and cardinality(dimensions) > 0 then
    insert into {{schema}}.store_info values ('embedding_model', model) on conflict (key) do nothing;
  end if;
end $$;

create or replace function {{schema}}.set_embedding_model(model text, dimension int) returns void
language plpgsql
set search_path = ''
as $$
begin
  perform {{schema}}.require_dimension(model, dimension);
  insert into {{schema}}.store_info values ('embedding_model', model)
    on conflict (key) do update set value = excluded.value;
end $$;

-- Documents with their complete chunk lists, replacing earlier versions, in one transaction.
-- Rows whose "embedding" is null are stored unembedded, for reembed to fill in later. A document is public
-- (read by every tenant and anon) only when the writer says so in its own "public" field, which the operator
-- sets (ingest --public); its metadata, written by whoever wrote the document, never publishes it. Chunks
-- inherit their document's visibility.
create or replace function {{schema}}.upsert_documents(
  documents jsonb, chunks jsonb, model text, tenant text default null
) returns void
language plpgsql security invoker
set search_path = {{schema}}, public, extensions
as $$
declare
  scope text := {{schema}}.writing_tenant(tenant);
begin
  perform {{schema}}.claim_embedding_model(model, array(
    select distinct jsonb_array_length(r -> 'embedding')
    from jsonb_array_elements(documents || chunks) r
    where jsonb_typeof(r -> 'embedding') = 'array'));
  delete from {{schema}}.documents d
  where d.tenant_id = scope and d.id in (select r ->> 'id' from jsonb_array_elements(documents) r);
  insert into {{schema}}.documents (tenant_id, id, title, content, metadata, source, is_public, content_hash,
                                    text_hash, embedding, embedding_model)
  select scope, r ->> 'id', r ->> 'title', r ->> 'content', coalesce(r -> 'metadata', '{}'), r ->> 'source',
         coalesce(r -> 'public' = 'true'::jsonb, false), r ->> 'content_hash',
         coalesce(r ->> 'text_hash', ''), (r ->> 'embedding')::vector,
         case when jsonb_typeof(r -> 'embedding') = 'array' then model end
  from jsonb_array_elements(documents) r;
  insert into {{schema}}.chunks (tenant_id, document_id, id, ordinal, heading_path, content, metadata, is_public,
                                 text_hash, embedding, embedding_model)
  select scope, r ->> 'document_id', r ->> 'id', (r ->> 'ordinal')::int, r ->> 'heading_path', r ->> 'content',
         coalesce(r -> 'metadata', '{}'), d.is_public, coalesce(r ->> 'text_hash', ''),
         (r ->> 'embedding')::vector, case when jsonb_typeof(r -> 'embedding') = 'array' then model end
  from jsonb_array_elements(chunks) r
  join {{schema}}.documents d on d.tenant_id = scope and d.id = r ->> 'document_id';
end $$;

create or replace function {{schema}}.delete_documents(ids text[], tenant text default null) returns int
language sql security invoker
set search_path = ''
as $$
  with gone as (
    delete from {{schema}}.documents d
    where d.tenant_id = {{schema}}.writing_tenant(tenant) and d.id = any (ids)
    returning 1)
  select count(*)::int from gone
$$;

-- For each stored id of the writing tenant: its content hash, whether it and all its chunks hold the
-- store's model's vectors, its source and whether it is public. [{id, content_hash, embedded, source,
-- public}], at most one per id asked for.
create or replace function {{schema}}.document_states(ids text[], tenant text default null)
returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
           'id', d.id, 'content_hash', d.content_hash, 'source', d.source, 'public', d.is_public,
           'embedded', d.embedding_model is not distinct from m.model and not exists (
             select 1 from {{schema}}.chunks c
             where c.tenant_id = d.tenant_id and c.document_id = d.id
               and c.embedding_model is distinct from m.model))), '[]')
  from {{schema}}.documents d
  cross join (select (select value from {{schema}}.store_info where key = 'embedding_model') as model) m
  where {{schema}}.check_bound('ids', pg_catalog.cardinality(ids), 1000)
    and d.tenant_id = {{schema}}.writing_tenant(tenant) and d.id = any (ids)
$$;

-- The ids of the writing tenant's documents whose source starts with prefix (a file, or a folder ended by its
-- separator), as one jsonb array: what a folder's files were stored as, for sync and prune. The operator's
-- (sources are the operator's file paths): not granted to anon or authenticated.
create or replace function {{schema}}.documents_from(prefix text, tenant text default null) returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.jsonb_agg(d.id order by d.id), '[]')
  from {{schema}}.documents d
  where d.tenant_id = {{schema}}.writing_tenant(tenant) and pg_catalog.starts_with(d.source, prefix)
$$;

-- The writing tenant's documents whose id starts with prefix, by id, at most max_rows, for `agent-retrieval list`
-- and `delete --prefix`: [{id, title, source, chunks, updated, public}], as one jsonb value.
create or replace function {{schema}}.list_documents(prefix text, max_rows int, tenant text default null)
returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
           'id', d.id, 'title', d.title, 'source', d.source, 'public', d.is_public,
           'updated', pg_catalog.to_char(d.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           'chunks', (select pg_catalog.count(*) from {{schema}}.chunks c
                      where c.tenant_id = d.tenant_id and c.document_id = d.id))
           order by d.id), '[]')
  from (select * from {{schema}}.documents d
        where d.tenant_id = {{schema}}.writing_tenant(tenant) and pg_catalog.starts_with(d.id, prefix)
        order by d.id limit max_rows) d
$$;

-- Whole documents by id, as a search would see them (the tenant's own and public ones; RLS decides for API
-- callers), the tenant's own first: [{id, title, content, metadata, source}], as one jsonb value.
create or replace function {{schema}}.get_documents(ids text[], tenant text default null) returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
           'id', d.id, 'title', d.title, 'content', d.content, 'metadata', d.metadata, 'source', d.source)
           order by d.id, d.tenant_id is distinct from tenant), '[]')
  from {{schema}}.documents d
  where {{schema}}.check_bound('ids', pg_catalog.cardinality(ids), 1000)
    and d.id = any (ids) and (tenant is null or d.tenant_id = tenant or d.is_public)
$$;

-- Stored vectors of a model for embedding-text hashes, so unchanged text is never embedded twice:
-- {text_hash: vector in pgvector's text form}, at most one per hash asked for.
create or replace function {{schema}}.vectors_by_hash(hashes text[], model text, tenant text default null)
returns jsonb
language sql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
  select coalesce(jsonb_object_agg(v.text_hash, v.embedding::text), '{}')
  from (
    select distinct on (r.text_hash) r.text_hash, r.embedding
    from (
      select d.text_hash, d.embedding, d.tenant_id, d.embedding_model from {{schema}}.documents d
      where d.text_hash = any (hashes)
      union all
      select c.text_hash, c.embedding, c.tenant_id, c.embedding_model from {{schema}}.chunks c
      where c.text_hash = any (hashes)
    ) r
    where {{schema}}.check_bound('hashes', pg_catalog.cardinality(hashes), 1000)
      and r.embedding_model = model and r.embedding is not null
      and r.tenant_id = {{schema}}.writing_tenant(tenant)
    order by r.text_hash
  ) v
$$;

-- Up to max_rows rows without a vector of `model`, oldest first, for backfill and re-embedding: [{id,
-- document_id, title, content, metadata, source, content_hash, ordinal, heading_path}].
create or replace function {{schema}}.pending_embeddings(
  level text, model text, max_rows int, tenant text default null
) returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(p) - 'rowid' order by p.rowid), '[]')
  from (
    (select d.rowid, d.id, d.id as document_id, d.title, d.content, d.metadata, d.source, d.content_hash,
            null::int as ordinal, null::text as heading_path
     from {{schema}}.documents d
     where level = 'documents' and d.tenant_id = {{schema}}.writing_tenant(tenant)
       and d.embedding_model is distinct from model
     order by d.rowid limit max_rows)
    union all
    (select c.rowid, c.id, c.document_id, null, c.content, c.metadata, null, null, c.ordinal, c.heading_path
     from {{schema}}.chunks c
     where level = 'chunks' and c.tenant_id = {{schema}}.writing_tenant(tenant)
       and c.embedding_model is distinct from model
     order by c.rowid limit max_rows)
  ) p
  where {{schema}}.check_bound('max_rows', max_rows, 100000)
$$;

-- Store the vectors (and embedding-text hashes) of rows already stored: [{id, text_hash, embedding}].
create or replace function {{schema}}.set_embeddings(level text, rows jsonb, model text, tenant text default null)
returns void
language plpgsql security invoker
set search_path = {{schema}}, public, extensions
as $$
declare
  scope text := {{schema}}.writing_tenant(tenant);
begin
  perform {{schema}}.require_dimension(model, jsonb_array_length(r -> 'embedding'))
  from jsonb_array_elements(rows) r;
  if level = 'documents' then
    update {{schema}}.documents d
    set text_hash = r ->> 'text_hash', embedding = (r ->> 'embedding')::vector, embedding_model = model,
        updated_at = now()
    from jsonb_array_elements(rows) r
    where d.tenant_id = scope and d.id = r ->> 'id';
  elsif level = 'chunks' then
    update {{schema}}.chunks c
    set text_hash = r ->> 'text_hash', embedding = (r ->> 'embedding')::vector, embedding_model = model
    from jsonb_array_elements(rows) r
    where c.tenant_id = scope and c.id = r ->> 'id';
  else
    raise exception using errcode = '22023', message = 'level must be documents or chunks';
  end if;
end $$;

-- The chunks of these documents in reading order, a page of at most max_rows at a time: documents in the
-- order given and, where an id names documents of several tenants (the caller's own and another's public
-- one), each of them whole in turn, by tenant. {rows: [{id, document_id, title, content, metadata,
-- ordinal, heading_path, tenant_id}], next}: pass `next` back as `after` for the following page; it is
-- null at the end.
-- Each document's chunks are read in ordinal order from the (tenant_id, document_id, ordinal) index, and
-- only as many as the page holds.
create or replace function {{schema}}.document_chunks(
  ids text[], max_rows int, tenant text default null, after jsonb default null
) returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  with resume as (
    select (after ->> 'position')::bigint as position, after ->> 'tenant_id' as tenant_id,
           (after ->> 'ordinal')::int as ordinal
  ),
  wanted as (  -- each document named that the caller may read, from the cursor's on
    select w.position, d.tenant_id, d.id, d.title
    from unnest(ids) with ordinality w(id, position)
    join {{schema}}.documents d on d.id = w.id
    cross join resume k
    where {{schema}}.check_bound('ids', pg_catalog.cardinality(ids), 10000)
      and {{schema}}.check_bound('max_rows', max_rows, 1000)
      and (tenant is null or d.tenant_id = tenant or d.is_public)
      and (after is null or (w.position, d.tenant_id) >= (k.position, k.tenant_id))
  ),
  page as (  -- one row more than the page holds, to tell whether anything is left
    select w.position, c.tenant_id, c.id, c.document_id, w.title, c.content, c.metadata, c.ordinal,
           c.heading_path,
           pg_catalog.row_number() over (order by w.position, w.tenant_id, c.ordinal) as n
    from wanted w
    cross join resume k
    cross join lateral (
      select c.* from {{schema}}.chunks c
      where c.tenant_id = w.tenant_id and c.document_id = w.id
        and (after is null or (w.position, w.tenant_id) > (k.position, k.tenant_id) or c.ordinal > k.ordinal)
      order by c.ordinal
      limit max_rows + 1
    ) c
    order by n
    limit max_rows + 1
  )
  select pg_catalog.jsonb_build_object(
    'rows', coalesce((select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                        'id', p.id, 'document_id', p.document_id, 'title', p.title, 'content', p.content,
                        'metadata', p.metadata, 'ordinal', p.ordinal, 'heading_path', p.heading_path,
                        'tenant_id', p.tenant_id) order by p.n)
                      from page p where p.n <= max_rows), '[]'),
    'next', (select pg_catalog.jsonb_build_object('position', p.position, 'tenant_id', p.tenant_id,
                                                  'ordinal', p.ordinal)
             from page p where p.n = max_rows and exists (select 1 from page q where q.n > max_rows)))
$$;

-- The chunks within `reach` places of each window's chunk, in its own tenant's document, of the documents
-- the caller may read: [{id, document_id, title, content, metadata, ordinal, heading_path, tenant_id}], each
-- window's in reading order. A window is {tenant_id, document_id, ordinal}; at most 100 windows and a reach
-- of 3 (the store checks both first), so the answer stays small. Read along (tenant_id, document_id,
-- ordinal).
create or replace function {{schema}}.chunk_neighbors(windows jsonb, reach int, tenant text default null)
returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
           'id', c.id, 'document_id', c.document_id, 'title', d.title, 'content', c.content,
           'metadata', c.metadata, 'ordinal', c.ordinal, 'heading_path', c.heading_path,
           'tenant_id', c.tenant_id) order by w.position, c.ordinal), '[]')
  from pg_catalog.jsonb_array_elements(windows) with ordinality w(window_, position)
  cross join lateral (select (w.window_ ->> 'ordinal')::int as ordinal, least(greatest(reach, 0), 3) as reach) a
  join {{schema}}.documents d
    on d.tenant_id = w.window_ ->> 'tenant_id' and d.id = w.window_ ->> 'document_id'
  join {{schema}}.chunks c
    on c.tenant_id = d.tenant_id and c.document_id = d.id
   and c.ordinal between a.ordinal - a.reach and a.ordinal + a.reach
  where {{schema}}.check_bound('windows', pg_catalog.jsonb_array_length(windows), 100)
    and (tenant is null or d.tenant_id = tenant or d.is_public)
$$;

-- Those of these ids that name no document the caller may read (in any tenant), in the order given: [id].
create or replace function {{schema}}.unknown_documents(ids text[], tenant text default null)
returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.jsonb_agg(wanted.id order by wanted.position), '[]')
  from unnest(ids) with ordinality wanted(id, position)
  where {{schema}}.check_bound('ids', pg_catalog.cardinality(ids), 10000)
    and not exists (
    select 1 from {{schema}}.documents d
    where d.id = wanted.id and (tenant is null or d.tenant_id = tenant or d.is_public))
$$;

-- For a planner to choose filters from: the max_values most common scalar metadata values of each key of
-- the documents the caller may read, as [[key, value, documents with it, documents with the key]]. Strings
-- longer than max_chars are left out.
create or replace function {{schema}}.metadata_counts(max_chars int, max_values int, tenant text default null)
returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(ranked.key, ranked.value, ranked.n,
                                                                    ranked.key_n)), '[]')
  from (
    select counted.key, counted.value, counted.n,
           pg_catalog.sum(counted.n) over (partition by counted.key) as key_n,
           pg_catalog.row_number() over (partition by counted.key
                                         order by counted.n desc, counted.value #>> '{}') as place
    from (
      select m.key, m.value, pg_catalog.count(*) as n
      from {{schema}}.documents d, pg_catalog.jsonb_each(d.metadata) m
      where (tenant is null or d.tenant_id = tenant or d.is_public)
        and (pg_catalog.jsonb_typeof(m.value) in ('number', 'boolean')
             or (pg_catalog.jsonb_typeof(m.value) = 'string'
                 and pg_catalog.length(m.value #>> '{}') <= max_chars))
      group by m.key, m.value
    ) counted
  ) ranked
  where {{schema}}.check_bound('max_values', max_values, 100) and {{schema}}.check_bound('max_chars', max_chars, 1000)
    and ranked.place <= max_values
$$;

create or replace function {{schema}}.store_stats(tenant text default null) returns jsonb
language sql stable security invoker
set search_path = ''
as $$
  with info as (select {{schema}}.get_store_info() as i)
  select jsonb_build_object(
    'documents', (select count(*) from {{schema}}.documents d
                  where tenant is null or d.tenant_id = tenant or d.is_public),
    'chunks', (select count(*) from {{schema}}.chunks c
               where tenant is null or c.tenant_id = tenant or c.is_public),
    'documents_missing_embeddings', (
      select count(*) from {{schema}}.documents d
      where (tenant is null or d.tenant_id = tenant or d.is_public)
        and d.embedding_model is distinct from (select i ->> 'embedding_model' from info)),
    'chunks_missing_embeddings', (
      select count(*) from {{schema}}.chunks c
      where (tenant is null or c.tenant_id = tenant or c.is_public)
        and c.embedding_model is distinct from (select i ->> 'embedding_model' from info)),
    'embedding_model', (select i ->> 'embedding_model' from info),
    'dimension', (select (i ->> 'dimension')::int from info),
    'schema_version', (select (i ->> 'schema_version')::int from info))
$$;
