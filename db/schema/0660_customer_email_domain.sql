-- 0660_customer_email_domain (issue 32, the operator's reads at 5,000,000): the console's search by
-- an email's domain ('@example.org', billing.console_customers) through a btree of the domains in
-- customer order. Forward-only.
--
-- The search by words (migration 0311) finds a domain as one of the email's words, through
-- customer_search_idx: a GIN index returns its matches unordered, so a domain shared by 5,015 of
-- 5,000,000 customers fetched all 5,015 rows to show the first 50 by id (57-71 ms p95 against the
-- goal's 50). Keyed (domain, id), the customers of one domain are in id order in the index: a page
-- reads the page's entries, whatever the domain's size. COLLATE "C": a prefix ('@exam', the
-- operator still typing) is a range of it. Partial: a customer without an email (every signup that
-- creates its customer) writes no entry. The expression is the one console_customers searches
-- with; the two must stay identical for the index to be used.
CREATE INDEX customer_email_domain_idx ON billing.customer ((lower(split_part(email, '@', 2)) COLLATE "C"), id)
    WHERE email IS NOT NULL;
-- The planner reads no statistics of a partial index's expression: these give it the domains'
-- (ANALYZE), so that a prefix shared by most customers walks them in id order and a rare one reads
-- its range (console_customers past 10 domains).
CREATE STATISTICS billing.customer_email_domain_stats ON ((lower(split_part(email, '@', 2)) COLLATE "C"))
    FROM billing.customer;
