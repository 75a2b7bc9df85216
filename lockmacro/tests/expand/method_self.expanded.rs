async fn place(&self, id: u64) -> Result<(), AppError> {
    let __lock_key: ::std::string::String = ::std::format!("o:{}:{}", self.tenant, id);
    let __lock_manager: ::lockcore::LockManager = ::lockcore::__private::manager(
        &(self.locks),
    );
    let __lock_options = ::lockcore::__private::with_key_template(
        ::lockcore::__private::options(
            &__lock_manager,
            ::core::option::Option::None,
            ::core::option::Option::Some(0u64),
            false,
        ),
        "o:<self.tenant>:<id>",
    );
    let __lock_guard = match ::lockcore::__private::acquire(
            &__lock_manager,
            &__lock_key,
            &__lock_options,
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                (),
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let lock: &::lockcore::LockGuard = &__lock_guard;
    let __lock_outcome = ::lockcore::__private::run_body(
            &__lock_guard,
            ::lockcore::__private::OnLost::Continue,
            async move {
                #[allow(
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop
                )]
                if false {
                    let __lock_ret: Result<(), AppError> = loop {};
                    return __lock_ret;
                }
                tracing::info!(key = lock.key(), "placing");
                self.place_inner(id).await
            },
        )
        .await;
    match ::lockcore::__private::finish(__lock_guard, __lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                (),
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
