-- Search over {{level}}: postings kept by triggers, then vector (match_{{level}}), BM25 keyword
-- (keyword_search_{{level}}) and fused hybrid search (hybrid_search_{{level}}). Written once, rendered per level.

-- The keyword postings, one row per term, scope and block of {{block}} consecutive rows: for each row of the
-- block holding the term, its place in the block, the term's count in it and the row's length (so scoring
-- reads one table). A common word's postings take a few bytes a row instead of a row each; a block's rows
-- are neighbours, mostly chunks of one document. The arrays stay in the row, uncompressed (storage plain):
-- scoring reads a few of a block's entries, and a block of {{block}} fits a page. They are always aggregated
-- together, in one pass over the same rows, so a place's count and length share its index.
create table if not exists {{schema}}.{{level}}_postings (
  term text not null,
  block int not null,        -- rowid / {{block}}
  tenant_id text not null,   -- the rows' scope, so row-level security holds here too
  is_public boolean not null,
  places smallint[] not null,  -- rowid % {{block}}
  tfs smallint[] not null,
  lengths int[] not null,
  primary key (term, block, tenant_id, is_public)
);
alter table {{schema}}.{{level}}_postings alter column places set storage plain,
  alter column tfs set storage plain, alter column lengths set storage plain;

-- How many rows of each scope hold each term: keyword search reads a term's idf here instead of counting
-- its postings, which for a common word are tens of thousands. Kept by the same triggers.
create table if not exists {{schema}}.{{level}}_term_stats (
  term text not null,
  tenant_id text not null,
  is_public boolean not null,
  rows bigint not null,
  primary key (term, tenant_id, is_public)
);

-- The postings of the rows `ids` (already counted in corpus_stats.rows by the caller, which holds that
-- row's lock), their terms' counts and the corpus length, all from one stemming of each row.
create or replace function {{schema}}.add_postings_{{level}}(ids bigint[]) returns void
language plpgsql
set search_path = ''
as $$
begin
  with words as (
    select w.term, (r.rowid / {{block}})::int as block, r.tenant_id, r.is_public,
           (r.rowid % {{block}})::smallint as place, w.tf, sum(w.tf) over (partition by r.rowid) as length
    from {{schema}}.{{level}} r cross join lateral {{schema}}.words({{indexed_text}}) w
    where r.rowid = any (ids)
  ),
  added as (
    insert into {{schema}}.{{level}}_postings as p (term, block, tenant_id, is_public, places, tfs, lengths)
      select w.term, w.block, w.tenant_id, w.is_public, array_agg(w.place),
             array_agg(w.tf), array_agg(w.length::int)
      from words w
      group by w.term, w.block, w.tenant_id, w.is_public order by w.term, w.block, w.tenant_id, w.is_public
    on conflict (term, block, tenant_id, is_public) do update
      set places = p.places || excluded.places, tfs = p.tfs || excluded.tfs, lengths = p.lengths || excluded.lengths
  ),
  counted as (
    insert into {{schema}}.{{level}}_term_stats as s (term, tenant_id, is_public, rows)
      select w.term, w.tenant_id, w.is_public, count(*) from words w
      group by w.term, w.tenant_id, w.is_public order by w.term, w.tenant_id, w.is_public
    on conflict (term, tenant_id, is_public) do update set rows = s.rows + excluded.rows
  )
  update {{schema}}.corpus_stats s set total_length = s.total_length + x.length
  from (select w.tenant_id, w.is_public, sum(w.tf) as length from words w group by w.tenant_id, w.is_public) x
  where s.level = '{{level}}' and s.tenant_id = x.tenant_id and s.is_public = x.is_public;
end $$;

create or replace function {{schema}}.index_{{level}}() returns trigger
language plpgsql
set search_path = ''
as $$
begin
  -- The corpus totals come first: a second writer of the same scope waits here for the first to commit
  -- before it touches any term's postings or count, so no two writers lock those in different orders.
  if tg_op in ('DELETE', 'UPDATE') then
    insert into {{schema}}.corpus_stats as s (level, tenant_id, is_public, rows, total_length)
      select '{{level}}', r.tenant_id, r.is_public, -count(*), 0
      from old_rows r group by r.tenant_id, r.is_public order by r.tenant_id, r.is_public
      on conflict (level, tenant_id, is_public) do update set rows = s.rows + excluded.rows;
  end if;
  if tg_op in ('INSERT', 'UPDATE') then
    insert into {{schema}}.corpus_stats as s (level, tenant_id, is_public, rows, total_length)
      select '{{level}}', r.tenant_id, r.is_public, count(*), 0
      from new_rows r group by r.tenant_id, r.is_public order by r.tenant_id, r.is_public
      on conflict (level, tenant_id, is_public) do update set rows = s.rows + excluded.rows;
  end if;
  if tg_op in ('DELETE', 'UPDATE') then
    -- Each block the old rows had a word in is taken out whole and put back without them.
    with words as (
      select w.term, (r.rowid / {{block}})::int as block, r.tenant_id, r.is_public,
             (r.rowid % {{block}})::smallint as place, w.tf
      from old_rows r cross join lateral {{schema}}.words({{indexed_text}}) w
    ),
    leaving as (
      select w.term, w.block, w.tenant_id, w.is_public, array_agg(w.place) as places
      from words w group by w.term, w.block, w.tenant_id, w.is_public
    ),
    gone as (
      delete from {{schema}}.{{level}}_postings p using leaving l
      where p.term = l.term and p.block = l.block and p.tenant_id = l.tenant_id and p.is_public = l.is_public
      returning p.*, l.places as leaving
    ),
    kept as (
      insert into {{schema}}.{{level}}_postings (term, block, tenant_id, is_public, places, tfs, lengths)
        select g.term, g.block, g.tenant_id, g.is_public, array_agg(u.place),
               array_agg(u.tf), array_agg(u.length)
        from gone g cross join lateral unnest(g.places, g.tfs, g.lengths) u(place, tf, length)
        where u.place <> all (g.leaving)
        group by g.term, g.block, g.tenant_id, g.is_public
    ),
    counted as (
      insert into {{schema}}.{{level}}_term_stats as s (term, tenant_id, is_public, rows)
        select w.term, w.tenant_id, w.is_public, -count(*) from words w
        group by w.term, w.tenant_id, w.is_public order by w.term, w.tenant_id, w.is_public
      on conflict (term, tenant_id, is_public) do update set rows = s.rows + excluded.rows
    )
    update {{schema}}.corpus_stats s set total_length = s.total_length - x.length
    from (select w.tenant_id, w.is_public, sum(w.tf) as length from words w group by w.tenant_id, w.is_public) x
    where s.level = '{{level}}' and s.tenant_id = x.tenant_id and s.is_public = x.is_public;
  end if;
  if tg_op in ('INSERT', 'UPDATE') then
    perform {{schema}}.add_postings_{{level}}(array(select r.rowid from new_rows r));
  end if;
  return null;
end $$;

-- One trigger per event: Postgres allows transition tables only on single-event triggers.
create or replace trigger {{level}}_index_insert after insert on {{schema}}.{{level}}
  referencing new table as new_rows for each statement execute function {{schema}}.index_{{level}}();
create or replace trigger {{level}}_index_delete after delete on {{schema}}.{{level}}
  referencing old table as old_rows for each statement execute function {{schema}}.index_{{level}}();
create or replace trigger {{level}}_index_update after update on {{schema}}.{{level}}
  referencing old table as old_rows new table as new_rows for each statement execute function {{schema}}.index_{{level}}();

-- The postings, term counts and corpus totals of every row, made again at once: a store of an earlier
-- version, or a first load, which writes its rows with the triggers off (PostgresStore.initial_load). A
-- block's postings are built in one insert, a few blocks at a time so memory stays small, into a table of
-- their own (temporary: no index, no WAL); then all go in at once in key order, so each word's rows lie
-- side by side (a search reads a word from a few pages, not a page a block) and the primary key grows
-- by appending, where inserting slice by slice wrote all over it and needed a CLUSTER after.
create or replace function {{schema}}.rebuild_postings_{{level}}() returns void
language plpgsql
set search_path = ''
set work_mem = '64MB'  -- a slice's postings sorted in memory
as $$
declare
  first bigint;
begin
  delete from {{schema}}.{{level}}_postings;
  delete from {{schema}}.{{level}}_term_stats;
  delete from {{schema}}.corpus_stats where level = '{{level}}';
  create temporary table {{level}}_postings_made (like {{schema}}.{{level}}_postings);
  for first in
    select b * {{block}} from generate_series(0, (select max(r.rowid) from {{schema}}.{{level}} r) / {{block}}, 8) b
  loop
    insert into pg_temp.{{level}}_postings_made (term, block, tenant_id, is_public, places, tfs, lengths)
      select w.term, w.block, w.tenant_id, w.is_public, array_agg(w.place),
             array_agg(w.tf), array_agg(w.length)
      from (select w.term, (r.rowid / {{block}})::int as block, r.tenant_id, r.is_public,
                   (r.rowid % {{block}})::smallint as place, w.tf,
                   (sum(w.tf) over (partition by r.rowid))::int as length
            from {{schema}}.{{level}} r cross join lateral {{schema}}.words({{indexed_text}}) w
            where r.rowid >= first and r.rowid < first + 8 * {{block}}) w
      group by w.term, w.block, w.tenant_id, w.is_public;
  end loop;
  insert into {{schema}}.{{level}}_postings
    select * from pg_temp.{{level}}_postings_made p order by p.term, p.block, p.tenant_id, p.is_public;
  insert into {{schema}}.{{level}}_term_stats (term, tenant_id, is_public, rows)
    select p.term, p.tenant_id, p.is_public, sum(pg_catalog.cardinality(p.places))
    from pg_temp.{{level}}_postings_made p group by p.term, p.tenant_id, p.is_public;
  insert into {{schema}}.corpus_stats (level, tenant_id, is_public, rows, total_length)
    select '{{level}}', r.tenant_id, r.is_public, r.rows, coalesce(l.length, 0)
    from (select r.tenant_id, r.is_public, count(*) as rows from {{schema}}.{{level}} r
          group by r.tenant_id, r.is_public) r
    left join (select p.tenant_id, p.is_public, sum(t.tf) as length
               from pg_temp.{{level}}_postings_made p cross join lateral unnest(p.tfs) t(tf)
               group by p.tenant_id, p.is_public) l on l.tenant_id = r.tenant_id and l.is_public = r.is_public;
  drop table pg_temp.{{level}}_postings_made;
end $$;

do $$
begin  -- a store of an earlier version: its postings in this layout (its old ones went in 001)
  if (select value::int from {{schema}}.store_info where key = 'schema_version') < 10 then
    perform {{schema}}.rebuild_postings_{{level}}();
  end if;
end $$;

-- Vector search: the match_count rows nearest by cosine, filters and scope applied inside the search. Ids are
-- unique within a tenant only, so each row comes with its tenant_id: (tenant_id, id) names it.
-- HNSW answers first. When filters, the document scope or row-level security leave it fewer rows than asked
-- for, two ways fill k: with pgvector 0.8 and a filter keeping at least 2% of the index's first candidates,
-- the index reads on (an iterative scan) to twice k permitted rows, the nearest k kept; a filter keeping less
-- (or an earlier pgvector) has an exact scan over the permitted rows, which then costs less than reading on.
-- A million chunks, k = 100: a filter keeping 5% took 331 ms exact, 58 reading on; one keeping 0.9%, 67 ms
-- exact, 169 reading on (BENCHMARKS.md, "Filtered search"). Under row-level security the exact scan reads
-- every row (the metadata's index is not leakproof, so the policy's filter comes first: 757 ms at 0.9%), so
-- there the index reads on whatever the share.
create or replace function {{schema}}.match_{{level}}(
  query_embedding vector,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  min_similarity float8 default -1,
  tenant text default null,
  -- the filter's rows as a client listed them (filter_scope_rows_*) at the corpus totals' stamp
  -- `rows_stamp`: while no write has changed it, they are scanned by their keys instead of the filter's
  -- index, which row-level security cannot use
  filter_rows bigint[] default null,
  rows_stamp text default null
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  tenant_id text, vector_similarity float8
)
language plpgsql stable security invoker
set search_path = {{schema}}, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
set hnsw.ef_search = 400  -- recall@10 0.99 at 100K chunks (ef 100: 0.94, 200: 0.97); BENCHMARKS.md
as $$
#variable_conflict use_column
declare
  -- while reembed is switching models, only rows holding the declared model's vectors are comparable
  stored_model text := (select value from {{schema}}.store_info where key = 'embedding_model');
  filtered jsonpath;  -- the filter as a path: its GIN index reads it, and a cheap first test of a row
  depth int := match_count;  -- the permitted rows asked of the index
  reading_on boolean := false;  -- pgvector's iterative scan
  nearest bigint[];  -- the rows found, nearest first, with their distances
  distances float8[];
  listed bigint[];  -- filter_rows, while no write has changed the stamp they were listed at
begin
  perform {{schema}}.check_search(match_count, query_embedding);
  perform {{schema}}.check_scope(filter, document_ids);
  perform {{schema}}.check_bound('filter_rows', pg_catalog.cardinality(filter_rows), {{scope_rows}});
  if coalesce(filter, '{}') <> '{}' then  -- unfiltered searches skip working it out
    filtered := {{schema}}.filter_path(filter);
  end if;
  if filter_rows is not null and {{schema}}.stamp_holds_{{level}}(rows_stamp, tenant) then
    listed := filter_rows;
  end if;
  if match_count > current_setting('hnsw.ef_search')::int then  -- the index yields at most ef_search rows
    perform pg_catalog.set_config('hnsw.ef_search', least(match_count, 1000)::text, true);
  end if;
  loop
    exit when listed is not null;  -- the filter's rows are known: the exact scan reads just them
    select coalesce(array_agg(a.rowid order by a.distance), '{}'),
           coalesce(array_agg(a.distance order by a.distance), '{}')
    into nearest, distances
    from (
      select d.rowid, d.embedding <=> query_embedding as distance
      from {{schema}}.{{level}} d
      where d.embedding is not null and d.embedding_model = stored_model
        and (filtered is null or pg_catalog.jsonb_path_exists(d.metadata, filtered))  -- most rows leave here
        and {{schema}}.metadata_matches(d.metadata, filter)
        and (document_ids is null or {{document_id}} = any (document_ids))
        and (tenant is null or d.tenant_id = tenant or d.is_public)
      order by d.embedding <=> query_embedding
      limit depth
    ) a;
    exit when reading_on or pg_catalog.cardinality(nearest) >= match_count
      or current_setting('hnsw.iterative_scan', true) is null  -- pgvector before 0.8
      or (pg_catalog.cardinality(nearest) * 50 < current_setting('hnsw.ef_search')::int
          and not pg_catalog.row_security_active('{{schema}}.{{level}}'));
    reading_on := true;
    depth := least(2 * match_count, 1000);
    perform pg_catalog.set_config('hnsw.iterative_scan', 'relaxed_order', true);
  end loop;
  if listed is not null or pg_catalog.cardinality(nearest) < match_count then
    select coalesce(array_agg(a.rowid order by a.distance), '{}'),
           coalesce(array_agg(a.distance order by a.distance), '{}')
    into nearest, distances
    from (
      select c.rowid, c.distance
      from (
        select d.rowid, d.metadata, d.embedding <=> query_embedding as distance
        from {{schema}}.{{level}} d
        where d.embedding is not null and d.embedding_model = stored_model
          and (listed is null or d.rowid = any (listed))
          and (listed is not null or filtered is null or d.metadata @? filtered)  -- else from the index
          and (document_ids is null or {{document_id}} = any (document_ids))
          and (tenant is null or d.tenant_id = tenant or d.is_public)
        order by (d.embedding <=> query_embedding) + 0  -- "+ 0": an expression the HNSW index cannot serve
        offset 0  -- kept apart, so metadata_matches confirms the nearest rows only, until k pass
      ) c
      where {{schema}}.metadata_matches(c.metadata, filter)
      limit match_count
    ) a;
  end if;
  return query
  select {{columns}}, 1 - b.distance
  from unnest(nearest[1:match_count], distances[1:match_count]) b(rowid, distance)  -- FROM syntax: no schema
  join {{from}} on d.rowid = b.rowid
  where 1 - b.distance >= min_similarity
  order by b.distance, d.id, d.tenant_id;
end $$;

-- The BM25 parts of the terms `wanted` (with their `idfs`) in the rows `ids`, summed per row with the idf
-- the row holds: each row's postings probed block by block when the rows are few against the terms'
-- `postings` (one index descent per block and term, a few microseconds, where reading a posting costs a
-- fraction of one), else read whole and matched.
create or replace function {{schema}}.parts_in_{{level}}(
  ids bigint[], wanted text[], idfs float8[], postings float8, average_length float8, tenant text
) returns table (row_id bigint, score float8, held float8)
language sql stable security invoker
set search_path = ''
as $$
  with probe as (
    select pg_catalog.cardinality(ids) * pg_catalog.cardinality(wanted) * 10 < postings as yes
  ),
  probed as (  -- each block of the rows, probed for the terms; each row found by its place
    select b.block::bigint * {{block}} + r.place as row_id, x.term, x.tfs[i]::int as tf, x.lengths[i] as length
    from (select (r.id / {{block}})::int as block, pg_catalog.array_agg((r.id % {{block}})::smallint) as places
          from pg_catalog.unnest(ids) r(id) where (select yes from probe) group by 1) b
    cross join lateral (
      select p.term, p.places, p.tfs, p.lengths
      from {{schema}}.{{level}}_postings p
      where p.term = any (wanted) and p.block = b.block and (tenant is null or p.tenant_id = tenant or p.is_public)
      offset 0  -- a probe per block: flattened, the planner would read every block of every term
    ) x
    cross join pg_catalog.unnest(b.places) r(place)
    cross join pg_catalog.array_position(x.places, r.place) i
    where i is not null
  ),
  matched as (  -- every posting of the terms, kept for those rows
    select o.row_id, o.term, o.tf, o.length
    from (select p.block::bigint * {{block}} + pg_catalog.unnest(p.places) as row_id, p.term,
                 pg_catalog.unnest(p.tfs)::int as tf, pg_catalog.unnest(p.lengths) as length
          from {{schema}}.{{level}}_postings p
          where not (select yes from probe)
            and p.term = any (wanted) and (tenant is null or p.tenant_id = tenant or p.is_public)) o
    where o.row_id in (select pg_catalog.unnest(ids))
  )
  select f.row_id, sum({{schema}}.bm25_part(w.idf, f.tf, f.length, average_length)), sum(w.idf)
  from (select * from probed union all select * from matched) f
  join unnest(wanted, idfs) w(term, idf) on w.term = f.term  -- FROM syntax: no schema
  group by f.row_id
$$;

-- BM25 scores (k1 = 1.2, b = 0.75, as SQLite FTS5) of the rows holding any of the `essential` terms, each
-- over all `terms` (with their idf and the rows holding each, `counts`), and each row's coverage: the share
-- of the query's idf it holds. Null `essential`: every row holding a term. Rows that cannot reach `floor`
-- are left out as soon as that shows (MaxScore, in stages): a row's score from the essential terms plus the
-- most the other terms could add (2.2 x idf each); then, with the rarer of the other terms added, plus the
-- most the commonest could (those whose bounds sum to at most half the floor). With `top`, only the `top`
-- rows the essential terms rank first are scored over the others (a first pass wants a k-th score).
create or replace function {{schema}}.bm25_{{level}}(
  terms text[], idfs float8[], essential text[], average_length float8, tenant text, document_ids text[],
  counts float8[] default null, floor float8 default 0, top int default null
) returns table (row_id bigint, score float8, coverage float8)
language sql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
  with weights as (  -- unnest of several arrays is FROM syntax, so it takes no schema
    select w.term, w.idf, coalesce(w.rows, 0) as rows,
           case when w.term = any (coalesce(essential, terms)) then 0
                when sum(2.2 * w.idf) over (partition by w.term = any (coalesce(essential, terms))
                                            order by w.idf, w.term) <= floor / 2 then 2
                else 1 end as stage
    from unnest(terms, idfs, counts) w(term, idf, rows)
  ),
  stages as (  -- the terms of each later stage (with their idfs), their postings and the most they can add
    select s.stage, pg_catalog.array_agg(w.term order by w.term) filter (where w.term is not null) as terms,
           pg_catalog.array_agg(w.idf order by w.term) filter (where w.term is not null) as idfs,
           coalesce(sum(w.rows), 0) as postings, coalesce(sum(2.2 * w.idf), 0) as bound
    from (values (1), (2)) s(stage) left join weights w on w.stage = s.stage
    group by s.stage
  ),
  found as (  -- every posting of the essential terms
    select p.block::bigint * {{block}} + unnest(p.places) as row_id, p.term, unnest(p.tfs) as tf,
           unnest(p.lengths) as length
    from {{schema}}.{{level}}_postings p
    -- The words as an array made once: under row-level security a condition holding coalesce() is not
    -- known to leak nothing, so the planner may not use it to read the index, and read every posting.
    where p.term = any (array(select pg_catalog.unnest(coalesce(essential, terms))))
      and (tenant is null or p.tenant_id = tenant or p.is_public)
  ),
  scored as (
    select f.row_id, w.term, w.idf, {{schema}}.bm25_part(w.idf, f.tf, f.length, average_length) as score
    from found f join weights w on w.term = f.term
  ),
  candidates as materialized (  -- the rows that can still reach `floor`
    select s.row_id, sum(s.score) as score, sum(s.idf) as held
    from scored s
    where document_ids is null
       or s.row_id in (select d.rowid from {{schema}}.{{level}} d where {{document_id}} = any (document_ids))
    group by s.row_id
    having sum(s.score) + (select sum(t.bound) from stages t) >= floor
  ),
  chosen as (  -- those scored over the other terms: all, or the `top`
    select * from candidates where top is null
    union all
    (select * from candidates where top is not null order by score desc, row_id limit top)
  ),
  first_parts as (  -- the rarer other terms' parts of those rows
    select o.* from stages t
    cross join {{schema}}.parts_in_{{level}}((select pg_catalog.array_agg(c.row_id) from chosen c),
                                            t.terms, t.idfs, t.postings, average_length, tenant) o
    where t.stage = 1 and t.terms is not null
  ),
  first_stage as materialized (  -- with them, the rows that can still reach `floor`
    select c.row_id, c.score + coalesce(o.score, 0) as score, c.held + coalesce(o.held, 0) as held
    from chosen c left join first_parts o on o.row_id = c.row_id
    where c.score + coalesce(o.score, 0) + (select t.bound from stages t where t.stage = 2) >= floor
  ),
  second_parts as (  -- the commonest terms' parts of those rows
    select o.* from stages t
    cross join {{schema}}.parts_in_{{level}}((select pg_catalog.array_agg(f.row_id) from first_stage f),
                                            t.terms, t.idfs, t.postings, average_length, tenant) o
    where t.stage = 2 and t.terms is not null
  )
  select f.row_id, f.score + coalesce(o.score, 0),
         (f.held + coalesce(o.held, 0)) / (select sum(w.idf) from weights w)
  from first_stage f left join second_parts o on o.row_id = f.row_id
$$;

-- The corpus totals over the rows the caller may read: how many, their average length, and a stamp that every
-- write to those rows changes (it updates its scope's totals, so their row versions, xmin): the DSN store
-- keeps words' postings between searches under it.
create or replace function {{schema}}.corpus_totals_{{level}}(tenant text)
returns table (rows float8, average_length float8, stamp text)
language sql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
  select coalesce(sum(s.rows), 0)::float8,
         coalesce(sum(s.total_length), 0)::float8 / greatest(sum(s.rows), 1),
         pg_catalog.md5(coalesce(pg_catalog.string_agg(
           pg_catalog.concat_ws(':', s.xmin, s.rows, s.total_length, s.is_public, s.tenant_id), ','
           order by s.tenant_id, s.is_public), ''))
  from {{schema}}.corpus_stats s
  where s.level = '{{level}}' and (tenant is null or s.tenant_id = tenant or s.is_public)
$$;

-- Whether no write to the rows the caller may read has changed the corpus totals since `given` (their stamp
-- when a client ranked, listed or read postings): what a client keeps under a stamp holds while it does.
create or replace function {{schema}}.stamp_holds_{{level}}(given text, tenant text)
returns boolean
language sql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
  select given is not distinct from (select t.stamp from {{schema}}.corpus_totals_{{level}}(tenant) t)
$$;

-- The query's words as keyword search weighs them: stemmed in english, stopwords dropped unless nothing else
-- is left, 32 at most, never parsed as query syntax. Over the rows the caller may read (whatever the filters,
-- so they reveal nothing of other tenants): the words some row holds, rarest first, with their idf and row
-- count; how many words the query has; and the corpus totals' rows, average length and stamp.
create or replace function {{schema}}.keyword_terms_{{level}}(query_text text, tenant text default null)
returns table (
  terms text[], idfs float8[], counts float8[], asked int, rows float8, average_length float8, stamp text
)
language sql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
  with totals as (
    select * from {{schema}}.corpus_totals_{{level}}(tenant)
  ),
  stemmed as (
    select pg_catalog.to_tsvector('english'::regconfig, q.text) as content_words,
           pg_catalog.to_tsvector('{{schema}}.english_all'::regconfig, q.text) as all_words
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
  weights as (
    select t.term, ln(1 + (o.rows - sum(t.rows)::float8 + 0.5) / (sum(t.rows)::float8 + 0.5)) as idf,
           sum(t.rows)::float8 as count
    from {{schema}}.{{level}}_term_stats t join words w on w.term = t.term cross join totals o
    where tenant is null or t.tenant_id = tenant or t.is_public
    group by t.term, o.rows
    having sum(t.rows) > 0
  )
  select (select pg_catalog.array_agg(w.term order by w.idf desc, w.term) from weights w),
         (select pg_catalog.array_agg(w.idf order by w.idf desc, w.term) from weights w),
         (select pg_catalog.array_agg(w.count order by w.idf desc, w.term) from weights w),
         (select count(*) from words)::int, o.rows, o.average_length, o.stamp
  from totals o
$$;

-- Each of `terms`' postings among the rows the caller may read, for a client that scores them itself (the
-- DSN store): its blocks, how many places each holds, then the places, counts and row lengths of all those
-- blocks in that order, each as the elements of the arrays' binary form (array_send past its 20-byte
-- header: a 4-byte length before every value), so that a word of 400K rows crosses as three strings; and the
-- corpus totals' stamp, read in the same snapshot as the postings.
create or replace function {{schema}}.keyword_postings_{{level}}(terms text[], tenant text default null)
returns table (term text, blocks int[], sizes int[], places bytea, tfs bytea, lengths bytea, stamp text)
language plpgsql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
#variable_conflict use_column
begin
  if coalesce(pg_catalog.cardinality(terms), 0) > 32 then
    raise exception using errcode = '22023',
      message = format('terms: at most 32 words, as a query has (got %s)', pg_catalog.cardinality(terms));
  end if;
  return query
  select p.term, pg_catalog.array_agg(p.block order by p.block, p.tenant_id, p.is_public),
         pg_catalog.array_agg(pg_catalog.cardinality(p.places) order by p.block, p.tenant_id, p.is_public),
         pg_catalog.string_agg(substr(pg_catalog.array_send(p.places), 21), ''::bytea
                               order by p.block, p.tenant_id, p.is_public),
         pg_catalog.string_agg(substr(pg_catalog.array_send(p.tfs), 21), ''::bytea
                               order by p.block, p.tenant_id, p.is_public),
         pg_catalog.string_agg(substr(pg_catalog.array_send(p.lengths), 21), ''::bytea
                               order by p.block, p.tenant_id, p.is_public),
         (select t.stamp from {{schema}}.corpus_totals_{{level}}(tenant) t)
  from {{schema}}.{{level}}_postings p
  where p.term = any (terms) and (tenant is null or p.tenant_id = tenant or p.is_public)
  group by p.term;
end $$;

-- The rows of the documents `document_ids` the caller may read, ascending: a client that scores keyword search
-- itself (the RPC stores) scores a document list's rows from the postings it keeps. At most
-- {{scope_rows}} + 1: one more says the list holds more rows than a client should score, and it asks
-- keyword_search_* instead.
create or replace function {{schema}}.scope_rows_{{level}}(document_ids text[], tenant text default null)
returns bigint[]
language plpgsql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
declare
  found bigint[];
begin
  perform {{schema}}.check_scope('{}', document_ids);
  select pg_catalog.array_agg(r.rowid order by r.rowid) into found
  from (select d.rowid from {{schema}}.{{level}} d
        where {{document_id}} = any (document_ids) and (tenant is null or d.tenant_id = tenant or d.is_public)
        limit {{scope_rows}} + 1) r;
  return coalesce(found, '{}');
end $$;

-- Of the rows `ids` (a client's unfiltered ranking's head, best first), those the filter keeps, in that
-- order; null when a write has changed the corpus totals' stamp since the ranking (the client then asks
-- keyword_search_*). At most {{filtered_head}} rows asked about.
create or replace function {{schema}}.filter_rows_{{level}}(
  ids bigint[], filter jsonb, stamp text default null, tenant text default null
) returns bigint[]
language plpgsql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
declare
  kept bigint[];
  filtered jsonpath;  -- the filter as a path: a cheap first test, which metadata_matches confirms
begin
  perform {{schema}}.check_scope(filter, null);
  perform {{schema}}.check_bound('ids', pg_catalog.cardinality(ids), {{filtered_head}});
  filtered := {{schema}}.filter_path(filter);
  if stamp is not null and not {{schema}}.stamp_holds_{{level}}(stamp, tenant) then
    return null;
  end if;
  select pg_catalog.array_agg(r.row_id order by r.place) into kept
  from pg_catalog.unnest(ids) with ordinality r(row_id, place)
  join {{schema}}.{{level}} d on d.rowid = r.row_id
  where (filtered is null or pg_catalog.jsonb_path_exists(d.metadata, filtered))
    and {{schema}}.metadata_matches(d.metadata, filter) and (tenant is null or d.tenant_id = tenant or d.is_public);
  return coalesce(kept, '{}');
end $$;

-- Every row the filter keeps among those the caller may read, ascending: a client that scores keyword search
-- itself keeps a selective filter's rows until a write and scores them from the postings it keeps, as it
-- scores a document list's, where filtering its ranking's head would ask about many times more rows. At
-- most {{scope_rows}} + 1 (one more: too many to keep); null when a write has changed the corpus totals'
-- stamp since the client's ranking.
create or replace function {{schema}}.filter_scope_rows_{{level}}(
  filter jsonb, stamp text default null, tenant text default null
) returns bigint[]
language plpgsql stable security invoker
set search_path = {{schema}}, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for this filter: its rows from the GIN index
as $$
declare
  found bigint[];
  filtered jsonpath;
begin
  perform {{schema}}.check_scope(filter, null);
  filtered := {{schema}}.filter_path(filter);
  if stamp is not null and not {{schema}}.stamp_holds_{{level}}(stamp, tenant) then
    return null;
  end if;
  select pg_catalog.array_agg(r.rowid order by r.rowid) into found
  from (select d.rowid from {{schema}}.{{level}} d
        where (filtered is null or d.metadata @? filtered) and {{schema}}.metadata_matches(d.metadata, filter)
          and (tenant is null or d.tenant_id = tenant or d.is_public)
        limit {{scope_rows}} + 1) r;
  return coalesce(found, '{}');
end $$;

-- The hit rows of a keyword search, in the order of `ids`, each with its score and coverage: the end of
-- keyword_search_* and of the DSN store's own scoring. At most 1000, as a search's match_count. Given the
-- corpus totals' stamp the rows were ranked at, none when a write has changed it since (the DSN store then
-- asks keyword_search_*, which reads everything in one snapshot).
create or replace function {{schema}}.keyword_rows_{{level}}(
  ids bigint[], scores float8[], coverages float8[], unknown int, stamp text default null,
  tenant text default null
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  tenant_id text, keyword_score float8, keyword_coverage float8, unknown_terms int
)
language plpgsql stable security invoker
set search_path = {{schema}}, public, extensions
as $$
#variable_conflict use_column
begin
  if coalesce(pg_catalog.cardinality(ids), 0) > 1000 then
    raise exception using errcode = '22023',
      message = format('ids: at most 1000 rows, as a search returns (got %s)', pg_catalog.cardinality(ids));
  end if;
  if stamp is not null and not {{schema}}.stamp_holds_{{level}}(stamp, tenant) then
    return;
  end if;
  return query
  select {{columns}}, r.score, r.coverage, unknown
  from unnest(ids, scores, coverages) with ordinality r(row_id, score, coverage, place)
  join {{from}} on d.rowid = r.row_id
  order by r.place;
end $$;

-- Keyword search: Okapi BM25 over the query's own words (keyword_terms_{{level}}). Each row's
-- keyword_coverage is the share of the query's idf its words hold (fusion weighs the keyword side by it);
-- unknown_terms counts the query's words no such row holds (confidence.py reads it: a question about
-- something never stored asks for new words).
-- Exact top k, pruned as the embedded store prunes (MaxScore): a row holding none of the rarer terms scores
-- at most the sum of the common terms' bounds (2.2 x idf each), so once k rows beat that sum, the rows
-- holding only common terms are never scored. Those are most of the postings of a long query.
create or replace function {{schema}}.keyword_search_{{level}}(
  query_text text,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  tenant text default null
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  tenant_id text, keyword_score float8, keyword_coverage float8, unknown_terms int
)
language plpgsql stable security invoker
set search_path = {{schema}}, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
set work_mem = '16MB'  -- scoring every row of common words groups ~100K rows at 100K chunks: in memory
as $$
#variable_conflict use_column
declare
  average_length float8;
  terms text[];          -- the query's words found in the caller's rows, rarest first
  idfs float8[];
  counts float8[];       -- how many of the caller's rows hold each
  asked int;             -- how many words the query has
  held float8 := 0;
  essential text[];      -- the terms whose rows are scored; null: all of them
  kth float8;
  bound float8 := 0;
  last int;
  first int;
  ids bigint[];
  scores float8[];
  coverages float8[];
  filtered boolean := coalesce(filter, '{}') <> '{}';
  wanted int := match_count;  -- rows of the unfiltered ranking to rank (with a filter: to filter)
  kept bigint[];
  indexed jsonpath;  -- the filter as a path: the metadata's index reads it, and a cheap first test of a row
begin
  perform {{schema}}.check_search(match_count, null);
  perform {{schema}}.check_scope(filter, document_ids);
  select w.terms, w.idfs, w.counts, w.asked, w.average_length into terms, idfs, counts, asked, average_length
  from {{schema}}.keyword_terms_{{level}}(query_text, tenant) w;
  if terms is null then
    return;
  end if;
  -- With a filter: the unfiltered ranking's first `wanted` rows, filtered, are exact once k of them pass
  -- or the ranking ends before `wanted` (every row below them scores lower); else four times as many, up
  -- to 1,000. A filter too selective for that (fewer than k of 1,000 at the rate seen) has its own rows
  -- scored, found by the metadata's index (filter_path): its rows are read, not every row holding a word.
  if filtered then
    wanted := least(1000, 4 * match_count);
    indexed := {{schema}}.filter_path(filter);
  end if;
  <<ranking>> loop
    essential := null;
    kth := null;
    bound := 0;
    last := pg_catalog.array_length(terms, 1);
    if last >= 3 then
      -- The first pass reads the rows of the rarest terms, as many as FIRST_PASS_ROWS x k postings
      -- allow, and k at least (fewer leave no k-th score to prune by), and scores over every term the
      -- FIRST_PASS_SCORED x k of them that the rarest terms rank first: k rows reach its k-th
      -- score, which is most often near the true k-th.
      first := 1;
      held := counts[1];
      while first < last
            and (held < wanted or held + counts[first + 1] <= {{first_pass_rows}} * wanted) loop
        first := first + 1;
        held := held + counts[first];
      end loop;
      essential := terms[1:first];
    end if;
    loop  -- two passes at most; the last scores every row that can reach the first's k-th score: exact
      select pg_catalog.array_agg(b.row_id order by b.score desc, b.row_id),
             pg_catalog.array_agg(b.score order by b.score desc, b.row_id),
             pg_catalog.array_agg(b.coverage order by b.score desc, b.row_id)
        into ids, scores, coverages
      from (select * from {{schema}}.bm25_{{level}}(terms, idfs, essential, average_length, tenant, document_ids,
                                                     counts, coalesce(kth, 0),
                                                     case when kth is null then {{first_pass_scored}} * wanted end)
            order by score desc, row_id limit wanted) b;
      exit when essential is null or kth is not null;
      -- a hair under the k-th score: the second pass sums a row's parts in another order, which can move the
      -- last bit of its score below the first pass's
      kth := case when pg_catalog.array_length(ids, 1) = wanted then scores[wanted] * (1 - 1e-9)
                  else 0 end;
      while last > 0 and bound + 2.2 * idfs[last] < kth loop  -- the commonest terms, while under the bound
        bound := bound + 2.2 * idfs[last];
        last := last - 1;
      end loop;
      -- every row that can reach the k-th score holds one of terms[1:last]
      essential := case when last < pg_catalog.array_length(terms, 1) then terms[1:last] end;
    end loop;
    exit ranking when not filtered;
    select pg_catalog.array_agg(r.row_id order by r.place) into kept
    from pg_catalog.unnest(ids) with ordinality r(row_id, place)
    join {{schema}}.{{level}} d on d.rowid = r.row_id
    where (indexed is null or pg_catalog.jsonb_path_exists(d.metadata, indexed))
      and {{schema}}.metadata_matches(d.metadata, filter);
    if coalesce(pg_catalog.cardinality(kept), 0) >= match_count
       or coalesce(pg_catalog.cardinality(ids), 0) < wanted then
      select pg_catalog.array_agg(r.row_id order by r.place), pg_catalog.array_agg(r.score order by r.place),
             pg_catalog.array_agg(r.coverage order by r.place)
        into ids, scores, coverages
      from (select u.row_id, u.score, u.coverage, u.place
            from unnest(ids, scores, coverages) with ordinality u(row_id, score, coverage, place)  -- FROM syntax
            where u.row_id = any (kept) order by u.place limit match_count) r;
      exit ranking;
    end if;
    -- more of the ranking while 1,000 rows would pass k at the rate these did; else the filter's own rows
    if wanted < 1000 and coalesce(pg_catalog.cardinality(kept), 0) * 1000 >= match_count * wanted then
      wanted := least(1000, 4 * wanted);
      continue ranking;
    end if;
    select pg_catalog.array_agg(b.row_id order by b.score desc, b.row_id),
           pg_catalog.array_agg(b.score order by b.score desc, b.row_id),
           pg_catalog.array_agg(b.held / (select pg_catalog.sum(i) from pg_catalog.unnest(idfs) i)
                               order by b.score desc, b.row_id)
      into ids, scores, coverages
    from (select p.row_id, p.score, p.held
          from {{schema}}.parts_in_{{level}}(
            (select pg_catalog.array_agg(d.rowid) from {{schema}}.{{level}} d
             where (indexed is null or d.metadata @? indexed)
               and {{schema}}.metadata_matches(d.metadata, filter)
               and (document_ids is null or {{document_id}} = any (document_ids))
               and (tenant is null or d.tenant_id = tenant or d.is_public)),
            terms, idfs, (select pg_catalog.sum(c) from pg_catalog.unnest(counts) c), average_length, tenant) p
          order by p.score desc, p.row_id limit match_count) b;
    exit ranking;
  end loop;
  return query
  select * from {{schema}}.keyword_rows_{{level}}(ids, scores, coverages, asked - pg_catalog.array_length(terms, 1));
end $$;

-- Hybrid search: both searches with the same filters and scope, fused in SQL by weighted reciprocal
-- rank (fusion => 'rrf') or a convex mix of standard scores ('convex'), as the tools fuse, the keyword
-- weight scaled by the keyword side's trust (fusion.keyword_trust: its best row's coverage of the query).
-- A row of one search meets its own row in the other by (tenant_id, id): the same id may be two tenants'.
create or replace function {{schema}}.hybrid_search_{{level}}(
  query_text text,
  query_embedding vector,
  match_count int default 10,
  filter jsonb default '{}',
  document_ids text[] default null,
  min_similarity float8 default -1,
  tenant text default null,
  fusion text default '{{default_fusion}}',  -- these defaults are the Context's, filled in by render_sql
  rrf_k int default {{default_rrf_k}},
  vector_weight float8 default {{default_vector_weight}},
  keyword_weight float8 default {{default_keyword_weight}},
  candidates int default {{default_candidates}}
) returns table (
  id text, document_id text, title text, content text, metadata jsonb, ordinal int, heading_path text,
  tenant_id text, vector_similarity float8, vector_rank int, keyword_score float8, keyword_rank int,
  score float8
)
language plpgsql stable security invoker
set search_path = {{schema}}, public, extensions
set plan_cache_mode = force_custom_plan  -- a plan for these arguments: generic ones scan everything
as $$
#variable_conflict use_column
begin
  perform {{schema}}.check_search(match_count, null);
  perform {{schema}}.check_search(candidates, null);
  if fusion not in ('rrf', 'convex') then
    raise exception using errcode = '22023', message = 'fusion must be rrf or convex';
  end if;
  if rrf_k < 1 or vector_weight < 0 or keyword_weight < 0 then
    raise exception using errcode = '22023', message = 'rrf_k must be at least 1 and the weights at least 0';
  end if;
  return query
  with v as (
    select * from {{schema}}.match_{{level}}(query_embedding, candidates, filter, document_ids, min_similarity, tenant)
      with ordinality r(id, document_id, title, content, metadata, ordinal, heading_path, tenant_id,
                        vector_similarity, rank)
  ),
  k as (
    select * from {{schema}}.keyword_search_{{level}}(query_text, candidates, filter, document_ids, tenant)
      with ordinality r(id, document_id, title, content, metadata, ordinal, heading_path, tenant_id,
                        keyword_score, keyword_coverage, unknown_terms, rank)
  ),
  trusted as (  -- the keyword weight, scaled for passages by the best keyword row's coverage
    select keyword_weight * {{keyword_trust}} as weight
  ),
  both_sides as (
    select coalesce(v.id, k.id) as id, coalesce(v.document_id, k.document_id) as document_id,
           coalesce(v.title, k.title) as title, coalesce(v.content, k.content) as content,
           coalesce(v.metadata, k.metadata) as metadata, coalesce(v.ordinal, k.ordinal) as ordinal,
           coalesce(v.heading_path, k.heading_path) as heading_path,
           coalesce(v.tenant_id, k.tenant_id) as tenant_id,
           v.vector_similarity, v.rank::int as vector_rank, k.keyword_score, k.rank::int as keyword_rank
    from v full join k on k.tenant_id = v.tenant_id and k.id = v.id
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
        coalesce(vector_weight / (rrf_k + b.vector_rank), 0) + coalesce(t.weight / (rrf_k + b.keyword_rank), 0)
      else (
        vector_weight * case when coalesce(s.v_sd, 0) = 0 then (b.vector_similarity is not null)::int
                             else (coalesce(b.vector_similarity, s.v_low) - s.v_mean) / s.v_sd end
        + t.weight * case when coalesce(s.k_sd, 0) = 0 then (b.keyword_score is not null)::int
                          else (coalesce(b.keyword_score, s.k_low) - s.k_mean) / s.k_sd end
      ) / coalesce(nullif(vector_weight + t.weight, 0), 1)
      end as score
    from both_sides b cross join stats s cross join trusted t
  )
  select * from fused order by score desc, id, tenant_id limit match_count;
end $$;
