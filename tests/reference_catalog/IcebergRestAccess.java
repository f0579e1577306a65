/*
 * Test-only. Part of the icegov reference Iceberg REST catalog (see ReferenceCatalog.java).
 *
 * This tiny class lives in Iceberg's own package only to reach two package-private helpers of the
 * Iceberg runtime jar, so the server never re-implements them:
 *   - RESTObjectMapper.mapper(): the Jackson mapper Iceberg's REST client itself uses, configured
 *     with RESTSerializers (kebab-case names, Iceberg's parsers for metadata, updates, ...);
 *   - CatalogHandlers.commit(ops, request): Iceberg's requirement-validating commit, used for the
 *     multi-table /v1/transactions/commit endpoint (1.10 has no public handler for it).
 */
package org.apache.iceberg.rest;

import java.util.ArrayList;
import java.util.List;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.BaseTransaction;
import org.apache.iceberg.Table;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.Transactions;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.requests.CommitTransactionRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

public final class IcebergRestAccess {
  private IcebergRestAccess() {}

  /** Iceberg's own REST object mapper (shaded Jackson). */
  public static ObjectMapper mapper() {
    return RESTObjectMapper.mapper();
  }

  /**
   * Multi-table commit. Every table change is first checked and applied by Iceberg's
   * CatalogHandlers.commit against an in-memory transaction (requirements are validated there, so
   * a failing requirement raises CommitFailedException before anything is written); only when all
   * changes passed are the transactions committed. The caller must make sure no other commit runs
   * meanwhile (the server holds an exclusive lock), otherwise the staged changes could be based on
   * stale metadata. Not atomic against I/O failures half-way: acceptable for a test catalog.
   */
  public static void commitTransaction(Catalog catalog, CommitTransactionRequest request) {
    List<Transaction> staged = new ArrayList<>();
    for (UpdateTableRequest change : request.tableChanges()) {
      Table table = catalog.loadTable(change.identifier());
      if (!(table instanceof BaseTable)) {
        throw new IllegalStateException("Not a BaseTable: " + change.identifier());
      }
      Transaction tx =
          Transactions.newTransaction(
              change.identifier().toString(), ((BaseTable) table).operations());
      CatalogHandlers.commit(((BaseTransaction.TransactionTable) tx.table()).operations(), change);
      staged.add(tx);
    }
    for (Transaction tx : staged) {
      tx.commitTransaction();
    }
  }
}
