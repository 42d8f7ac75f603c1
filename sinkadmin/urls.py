from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from connectors import metrics

admin.site.site_header = "sinkadmin"
admin.site.site_title = "sinkadmin admin"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("connectors.api.urls")),
    path("metrics", metrics.metrics, name="metrics"),
    path("", include("connectors.urls")),
]
