/*
 * Test-only. Part of the icegov reference Iceberg REST catalog (see ReferenceCatalog.java).
 *
 * The view side of the reference catalog. HadoopCatalog (tables) has no views, so views live in
 * Apache Iceberg's own InMemoryCatalog (a BaseMetastoreViewCatalog: view metadata, versions,
 * requirements and updates are all Iceberg's logic; in Iceberg 1.10 its FileIO is InMemoryFileIO,
 * so view metadata files stay in memory and are lost on restart, like namespace properties).
 *
 * Only the joints between the two catalogs are added here: a view may exist only in a namespace
 * HadoopCatalog has (the namespace is mirrored into the in-memory catalog on first use), and a
 * table and a view never share a name.
 */
package referencecatalog;

import java.util.List;
import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.inmemory.InMemoryCatalog;
import org.apache.iceberg.view.View;
import org.apache.iceberg.view.ViewBuilder;

final class ReferenceViews {
  private final InMemoryCatalog views = new InMemoryCatalog();
  private final Catalog tables;
  private final SupportsNamespaces namespaces;

  ReferenceViews(Catalog tables, SupportsNamespaces namespaces, String warehouseUri) {
    this.tables = tables;
    this.namespaces = namespaces;
    views.initialize("reference", Map.of(CatalogProperties.WAREHOUSE_LOCATION, warehouseUri));
  }

  List<TableIdentifier> list(Namespace namespace) {
    mirror(namespace);
    return views.listViews(namespace);
  }

  View load(TableIdentifier identifier) {
    return views.loadView(identifier);
  }

  boolean exists(TableIdentifier identifier) {
    return views.viewExists(identifier);
  }

  ViewBuilder build(TableIdentifier identifier) {
    mirror(identifier.namespace());
    if (tables.tableExists(identifier)) {
      throw new AlreadyExistsException("Table with same name already exists: %s", identifier);
    }
    return views.buildView(identifier);
  }

  boolean drop(TableIdentifier identifier) {
    return views.dropView(identifier);
  }

  void rename(TableIdentifier from, TableIdentifier to) {
    mirror(to.namespace());
    if (tables.tableExists(to)) {
      throw new AlreadyExistsException("Cannot rename %s to %s. Table already exists", from, to);
    }
    views.renameView(from, to);
  }

  /** Does the namespace hold a view? (HadoopCatalog must not drop it then.) */
  boolean holdsViews(Namespace namespace) {
    return views.namespaceExists(namespace) && !views.listViews(namespace).isEmpty();
  }

  /** Forget the mirrored namespace once HadoopCatalog has dropped it. */
  synchronized void forget(Namespace namespace) {
    if (views.namespaceExists(namespace)) {
      views.dropNamespace(namespace);
    }
  }

  private synchronized void mirror(Namespace namespace) {
    if (!namespaces.namespaceExists(namespace)) {
      throw new NoSuchNamespaceException("Namespace does not exist: %s", namespace);
    }
    if (!views.namespaceExists(namespace)) {
      views.createNamespace(namespace);
    }
  }
}
