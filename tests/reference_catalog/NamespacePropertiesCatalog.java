/*
 * Test-only. Part of the icegov reference Iceberg REST catalog (see ReferenceCatalog.java).
 *
 * Apache Iceberg's HadoopCatalog, unchanged except for namespace properties: HadoopCatalog keeps
 * namespaces as bare directories and rejects any property, yet Spark sends {"owner": ...} on every
 * CREATE NAMESPACE. The properties are therefore stripped before HadoopCatalog sees them and kept
 * in memory (lost on restart), and merged into what HadoopCatalog reports on load. Everything else
 * (existence checks, errors, tables, commits) is HadoopCatalog's own behaviour.
 *
 * Views: HadoopCatalog has none, so this catalog is also a ViewCatalog whose views are kept by
 * Iceberg's InMemoryCatalog (ReferenceViews); a namespace holding views is not empty, and a table
 * cannot take a view's name.
 */
package referencecatalog;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.Schema;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.catalog.ViewCatalog;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.hadoop.HadoopCatalog;
import org.apache.iceberg.view.View;
import org.apache.iceberg.view.ViewBuilder;

final class NamespacePropertiesCatalog extends HadoopCatalog implements ViewCatalog {
  private final Map<Namespace, Map<String, String>> extraProperties = new HashMap<>();
  private ReferenceViews views;

  static NamespacePropertiesCatalog open(String name, String warehouseUri) {
    NamespacePropertiesCatalog catalog = new NamespacePropertiesCatalog();
    catalog.setConf(new Configuration());
    catalog.initialize(name, Map.of(CatalogProperties.WAREHOUSE_LOCATION, warehouseUri));
    catalog.views = new ReferenceViews(catalog, catalog, warehouseUri);
    return catalog;
  }

  // --------------------------------------------------------------------- views

  @Override
  public List<TableIdentifier> listViews(Namespace namespace) {
    return views.list(namespace);
  }

  @Override
  public View loadView(TableIdentifier identifier) {
    return views.load(identifier);
  }

  @Override
  public boolean viewExists(TableIdentifier identifier) {
    return views.exists(identifier);
  }

  @Override
  public ViewBuilder buildView(TableIdentifier identifier) {
    return views.build(identifier);
  }

  @Override
  public boolean dropView(TableIdentifier identifier) {
    return views.drop(identifier);
  }

  @Override
  public void renameView(TableIdentifier from, TableIdentifier to) {
    views.rename(from, to);
  }

  @Override
  public TableBuilder buildTable(TableIdentifier identifier, Schema schema) {
    if (views.exists(identifier)) {
      throw new AlreadyExistsException("View with same name already exists: %s", identifier);
    }
    return super.buildTable(identifier, schema);
  }

  // ---------------------------------------------------------------- namespaces

  @Override
  public void createNamespace(Namespace namespace, Map<String, String> properties) {
    synchronized (extraProperties) {
      super.createNamespace(namespace, Map.of());
      extraProperties.put(namespace, new HashMap<>(properties));
    }
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(Namespace namespace) {
    Map<String, String> result = new HashMap<>(super.loadNamespaceMetadata(namespace));
    synchronized (extraProperties) {
      result.putAll(extraProperties.getOrDefault(namespace, Map.of()));
    }
    return result;
  }

  @Override
  public boolean setProperties(Namespace namespace, Map<String, String> properties) {
    super.loadNamespaceMetadata(namespace); // NoSuchNamespaceException when missing
    synchronized (extraProperties) {
      extraProperties.computeIfAbsent(namespace, ns -> new HashMap<>()).putAll(properties);
    }
    return true;
  }

  @Override
  public boolean removeProperties(Namespace namespace, Set<String> keys) {
    super.loadNamespaceMetadata(namespace); // NoSuchNamespaceException when missing
    synchronized (extraProperties) {
      Map<String, String> current = extraProperties.get(namespace);
      return current != null && current.keySet().removeAll(keys);
    }
  }

  @Override
  public boolean dropNamespace(Namespace namespace) {
    synchronized (extraProperties) {
      if (views.holdsViews(namespace)) {
        throw new NamespaceNotEmptyException("Namespace %s is not empty: it holds views", namespace);
      }
      boolean dropped = super.dropNamespace(namespace);
      if (dropped) {
        extraProperties.remove(namespace);
        views.forget(namespace);
      }
      return dropped;
    }
  }
}
