-- Row-level security, as on Supabase: an authenticated caller reads its tenant's rows and public ones,
-- anon reads public rows only, and only service_role (which bypasses RLS) writes. Every function above
-- is security invoker, so these policies hold inside them. On plain Postgres without Supabase's roles
-- the policies are skipped; the table owner (the DSN's user) is not subject to RLS.

alter table {{schema}}.store_info enable row level security;
alter table {{schema}}.documents enable row level security;
alter table {{schema}}.chunks enable row level security;
alter table {{schema}}.documents_postings enable row level security;
alter table {{schema}}.chunks_postings enable row level security;
alter table {{schema}}.documents_term_stats enable row level security;
alter table {{schema}}.chunks_term_stats enable row level security;
alter table {{schema}}.corpus_stats enable row level security;

do $$
declare
  rel text;
begin
  if not exists (select 1 from pg_roles where rolname = 'authenticated')
     or not exists (select 1 from pg_roles where rolname = 'anon') then
    return;
  end if;

  grant usage on schema {{schema}} to anon, authenticated;
  grant select on all tables in schema {{schema}} to anon, authenticated;
  revoke insert, update, delete, truncate on all tables in schema {{schema}} from anon, authenticated;

  drop policy if exists "everyone reads store info" on {{schema}}.store_info;
  create policy "everyone reads store info" on {{schema}}.store_info for select to anon, authenticated using (true);

  foreach rel in array array['documents', 'chunks', 'documents_postings', 'chunks_postings', 'documents_term_stats',
                             'chunks_term_stats', 'corpus_stats'] loop
    execute format('drop policy if exists "tenant and public rows" on {{schema}}.%I', rel);
    execute format('create policy "tenant and public rows" on {{schema}}.%I for select to authenticated '
                   'using (tenant_id = (select {{schema}}.current_tenant()) or is_public)', rel);
    execute format('drop policy if exists "public rows" on {{schema}}.%I', rel);
    execute format('create policy "public rows" on {{schema}}.%I for select to anon using (is_public)', rel);
  end loop;

  -- Writing functions are for the service role; reading ones for everyone (RLS decides what they see).
  revoke execute on all functions in schema {{schema}} from public;
  grant execute on all functions in schema {{schema}} to anon, authenticated;
  revoke execute on function
    {{schema}}.upsert_documents(jsonb, jsonb, text, text),
    {{schema}}.delete_documents(text[], text),
    {{schema}}.documents_from(text, text),
    {{schema}}.list_documents(text, int, text),
    {{schema}}.set_embeddings(text, jsonb, text, text),
    {{schema}}.set_embedding_model(text, int),
    {{schema}}.claim_embedding_model(text, int[]),
    {{schema}}.add_postings_documents(bigint[]),
    {{schema}}.add_postings_chunks(bigint[]),
    {{schema}}.rebuild_postings_documents(),
    {{schema}}.rebuild_postings_chunks()
  from anon, authenticated;

  -- A statement through PostgREST runs at most as long as a Supabase project lets it (anon 3 s, authenticated
  -- 8 s), where the operator set no timeout of their own: PostgREST applies a role's settings when it takes
  -- that role. A database user who may not alter the roles keeps what they have, with a notice.
  foreach rel in array array['anon:3s', 'authenticated:8s'] loop
    if not exists (
      select 1 from pg_catalog.pg_db_role_setting s join pg_catalog.pg_roles r on r.oid = s.setrole
      where r.rolname = pg_catalog.split_part(rel, ':', 1)
        and exists (select 1 from pg_catalog.unnest(s.setconfig) c where c like 'statement\_timeout=%')
    ) then
      begin
        execute pg_catalog.format('alter role %I set statement_timeout = %L',
                                  pg_catalog.split_part(rel, ':', 1), pg_catalog.split_part(rel, ':', 2));
      exception when insufficient_privilege then
        raise notice 'statement_timeout of role % left as it is: %', pg_catalog.split_part(rel, ':', 1), sqlerrm;
      end;
    end if;
  end loop;
end $$;

do $$
begin
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    grant usage on schema {{schema}} to service_role;
    grant all on all tables in schema {{schema}} to service_role;
    grant execute on all functions in schema {{schema}} to service_role;
  end if;
end $$;

-- Everything of this version is in place: record it (a fresh store was created at it).
update {{schema}}.store_info set value = '{{schema_version}}'
where key = 'schema_version' and value::int < {{schema_version}};

-- PostgREST (and so Supabase) caches the schema and the roles' settings: tell it both changed.
notify pgrst, 'reload schema';
notify pgrst, 'reload config';
