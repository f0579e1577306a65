/*
 * Test-only. Part of the icegov reference Iceberg REST catalog (see ReferenceCatalog.java).
 *
 * Apache Iceberg's HadoopCatalog, unchanged except for namespace properties: HadoopCatalog keeps
 * namespaces as bare directories and rejects any property, yet Spark sends {"owner": ...} on every
 * CREATE NAMESPACE. The properties are therefore stripped before HadoopCatalog sees them and kept
 * in memory (lost on restart), and merged into what HadoopCatalog reports on load. Everything else
 * (existence checks, errors, tables, commits) is HadoopCatalog's own behaviour.
 */
package referencecatalog;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.hadoop.HadoopCatalog;

final class NamespacePropertiesCatalog extends HadoopCatalog {
  private final Map<Namespace, Map<String, String>> extraProperties = new HashMap<>();

  static NamespacePropertiesCatalog open(String name, String warehouseUri) {
    NamespacePropertiesCatalog catalog = new NamespacePropertiesCatalog();
    catalog.setConf(new Configuration());
    catalog.initialize(name, Map.of(CatalogProperties.WAREHOUSE_LOCATION, warehouseUri));
    return catalog;
  }

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
      boolean dropped = super.dropNamespace(namespace);
      if (dropped) {
        extraProperties.remove(namespace);
      }
      return dropped;
    }
  }
}
